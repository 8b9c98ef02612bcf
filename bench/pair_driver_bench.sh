#!/usr/bin/env bash
# The driver path of two builds, A B A B on one machine: driver_bench through each build's shim
# and rgpu-server, and the raw TCP round trip (tcp_baseline) beside each pair, so that a change's
# cost is read against the commit before it in the same run (issue 16: "against the commit before
# it, same machine, same run, interleaved"). Writes OUT/{base,new}-N.json, OUT/tcp-N.json and
# OUT/pairs.json (per pair and the medians: the small synchronous call, launch, launch + sync,
# 8-byte copies, bulk bandwidth, and new/base).
#   bench/pair_driver_bench.sh BASE_BUILD NEW_BUILD OUT [--driver PATH|fake] [--pairs N] [--quick] [--tls-new|--tls]
#                              [--same-process ROUNDS]
# --same-process ROUNDS: each pair is one program (NEW's bench/device_pair_bench) with
# both servers' devices (RGPU_SERVER=a,b), timing the small synchronous call on each in ROUNDS
# alternating rounds: OUT/same-N.json and OUT/same_process.json (each program's median ratio of
# rounds, and their median). Between programs, the same call's median moved by up to 30% on the
# H200 host (where the scheduler put client and servers), more than TLS adds. Not with --tls: a
# program pins one fingerprint.
# --tls-new: the new side's server runs with `--tls auto` and its client dials tls:// with the
# fingerprint pinned (issue 17: TLS against plain TCP, one build given twice); --tls: both sides.
# RGPU_PAIR_BASE_ENV, RGPU_PAIR_NEW_ENV: VAR=VALUE words for that side's rgpu-server (one build
# given twice, e.g. RGPU_PAIR_BASE_ENV=RGPU_INLINE_CALLS=0 to time a setting).
# Each build needs bin/rgpu-server, bin/driver_bench and lib/libcuda.so.1; the kernel image and
# tcp_baseline are NEW_BUILD's.
set -uo pipefail
BASE=$1 NEW=$2 OUT=$3
shift 3
DRIVER=fake PAIRS=4 QUICK="" TLS_NEW=0 TLS_BASE=0 SAME_ROUNDS=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --driver) DRIVER=$2; shift 2 ;;
    --pairs) PAIRS=$2; shift 2 ;;
    --quick) QUICK=--quick; shift ;;
    --tls-new) TLS_NEW=1; shift ;;
    --tls) TLS_NEW=1 TLS_BASE=1; shift ;;
    --same-process) SAME_ROUNDS=$2; shift 2 ;;
    *) echo "pair_driver_bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [ -n "$SAME_ROUNDS" ] && [ $TLS_BASE = 1 ]; then
  echo "pair_driver_bench: --same-process cannot take --tls: one program pins one server's fingerprint (use --tls-new)" >&2
  exit 2
fi
mkdir -p "$OUT"
IMAGE=$NEW/tests/kernels/test_kernels.fatbin
# Starts SIDE's rgpu-server from BUILD for pair PAIR; sets SERVER_PID, SERVER_RT (its runtime
# directory), SERVER_ADDR (what RGPU_SERVER names it by) and SERVER_FP (its fingerprint over TLS).
start_server() {  # start_server SIDE BUILD PAIR
  local port=$((20000 + RANDOM % 20000))
  SERVER_RT=$(mktemp -d /tmp/rgpu-rt-XXXX) SERVER_ADDR=127.0.0.1:$port SERVER_FP=""
  # --runtime-dir only where the build knows it (the commit before the channel does not).
  local extra=() tls=0
  "$2/bin/rgpu-server" --help 2>&1 | grep -q -- --runtime-dir && extra=(--runtime-dir "$SERVER_RT")
  [ "$1" = new ] && [ $TLS_NEW = 1 ] && tls=1
  [ "$1" = base ] && [ $TLS_BASE = 1 ] && tls=1
  [ $tls = 1 ] && extra+=(--tls auto --state-dir "$SERVER_RT/state")
  local server_env
  [ "$1" = base ] && read -ra server_env <<<"${RGPU_PAIR_BASE_ENV:-}" || read -ra server_env <<<"${RGPU_PAIR_NEW_ENV:-}"
  env "${server_env[@]}" "$2/bin/rgpu-server" --listen 127.0.0.1:$port --driver "$DRIVER" --cache-dir none "${extra[@]}" \
    >"$OUT/server-$1-$3.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
  if [ $tls = 1 ]; then
    SERVER_ADDR=tls://127.0.0.1:$port
    SERVER_FP=$(grep -o 'fingerprint sha256:[0-9a-f]*' "$OUT/server-$1-$3.log" | head -1 | cut -d' ' -f2)
  fi
}
stop_server() {  # stop_server PID RUNTIME_DIR
  kill "$1"; wait "$1" 2>/dev/null
  rm -rf "$2"
}
one() {  # one SIDE BUILD PAIR
  start_server "$1" "$2" "$3"
  local client=(RGPU_SERVER=$SERVER_ADDR)
  [ -n "$SERVER_FP" ] && client+=(RGPU_TLS_FINGERPRINT=$SERVER_FP)
  env LD_LIBRARY_PATH=$2/lib "${client[@]}" RGPU_ANSWER_CACHE=none \
    "$2/bin/driver_bench" "$IMAGE" "$OUT/$1-$3.json" $QUICK >"$OUT/$1-$3.txt" 2>&1 || echo "$1 pair $3: driver_bench failed"
  stop_server $SERVER_PID "$SERVER_RT"
}
# --same-process: both servers at once and one program of NEW's (bench/device_pair_bench.c) timing
# the small call on each in alternating rounds; device 0 is base in odd pairs, new in even ones.
same() {  # same PAIR
  start_server base "$BASE" "$1"
  local bpid=$SERVER_PID brt=$SERVER_RT baddr=$SERVER_ADDR fp=$SERVER_FP
  start_server new "$NEW" "$1"
  [ -n "$SERVER_FP" ] && fp=$SERVER_FP
  local list=$baddr,$SERVER_ADDR
  (($1 % 2)) || list=$SERVER_ADDR,$baddr
  env LD_LIBRARY_PATH=$NEW/lib RGPU_SERVER=$list ${fp:+RGPU_TLS_FINGERPRINT=$fp} RGPU_ANSWER_CACHE=none \
    "$NEW/bin/device_pair_bench" "$OUT/same-$1.json" "$SAME_ROUNDS" >"$OUT/same-$1.txt" 2>&1 ||
    echo "pair $1: device_pair_bench failed: $(tail -1 "$OUT/same-$1.txt")"
  stop_server $SERVER_PID "$SERVER_RT"
  stop_server $bpid "$brt"
}
for p in $(seq "$PAIRS"); do
  if [ -n "$SAME_ROUNDS" ]; then same $p; continue; fi
  "$NEW/bin/tcp_baseline" "$OUT/tcp-$p.json" $QUICK >/dev/null 2>&1
  # Alternate which side goes first, so neither always runs on a machine the other just warmed.
  if ((p % 2)); then one base "$BASE" $p; one new "$NEW" $p; else one new "$NEW" $p; one base "$BASE" $p; fi
done
if [ -n "$SAME_ROUNDS" ]; then
  python3 - "$OUT" "$PAIRS" <<'EOF'
import json, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
rows = []
for p in range(1, pairs + 1):
    try:
        s = json.load(open(f"{out}/same-{p}.json"))
    except (OSError, ValueError):
        continue
    # Device 0 is base in odd pairs.
    base, new = ("device0_us", "device1_us") if p % 2 else ("device1_us", "device0_us")
    ratios = [r[new] / r[base] for r in s["rounds"]]
    rows.append({"pair": p, "base_us": s[base], "new_us": s[new], "new_over_base": statistics.median(ratios),
                 "rounds": len(ratios)})
res = {"what": "the small synchronous call (cuMemGetInfo) on two servers in one program, alternating rounds",
       "pairs": rows}
if rows:
    res["new_over_base_median"] = statistics.median(r["new_over_base"] for r in rows)
    res["base_us_median"] = statistics.median(r["base_us"] for r in rows)
    res["new_us_median"] = statistics.median(r["new_us"] for r in rows)
json.dump(res, open(f"{out}/same_process.json", "w"), indent=1)
print(f"{len(rows)} programs, both servers in each; the small synchronous call:")
for r in rows:
    print(f"  program {r['pair']}: base {r['base_us']:.3f} us, new {r['new_us']:.3f} us, new/base {r['new_over_base']:.3f}"
          f" (median of {r['rounds']} rounds)")
if rows:
    print(f"  median: base {res['base_us_median']:.3f} us, new {res['new_us_median']:.3f} us, "
          f"new/base {res['new_over_base_median']:.3f}")
EOF
  exit 0
fi
python3 - "$OUT" "$PAIRS" <<'EOF'
import json, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
keys = ["small_sync_call_us", "small_sync_call_p99_us", "launch_us", "launch_sync_us", "htod_gbps", "dtoh_gbps"]
rows = []
for p in range(1, pairs + 1):
    try:
        b, n = (json.load(open(f"{out}/{s}-{p}.json")) for s in ("base", "new"))
        t = json.load(open(f"{out}/tcp-{p}.json"))
    except (OSError, ValueError):
        continue
    row = {"pair": p, "tcp_rtt_us": t.get("tcp_rtt_us")}
    for k in keys:
        row[k] = {"base": b.get(k), "new": n.get(k)}
    rows.append(row)
med = {}
for k in keys:
    bs = [r[k]["base"] for r in rows if r[k]["base"] is not None]
    ns = [r[k]["new"] for r in rows if r[k]["new"] is not None]
    ratios = [r[k]["new"] / r[k]["base"] for r in rows if r[k]["base"] and r[k]["new"] is not None]
    if bs and ns:
        # new_over_base: the ratio of the medians; pair_ratio_median: the median of each pair's ratio.
        med[k] = {"base": statistics.median(bs), "new": statistics.median(ns),
                  "new_over_base": statistics.median(ns) / statistics.median(bs),
                  "pair_ratio_median": statistics.median(ratios) if ratios else None}
tcp = [r["tcp_rtt_us"] for r in rows if r["tcp_rtt_us"]]
res = {"pairs": rows, "medians": med, "tcp_rtt_us_median": statistics.median(tcp) if tcp else None}
json.dump(res, open(f"{out}/pairs.json", "w"), indent=1)
print(f"{len(rows)} pairs; raw TCP round trip {res['tcp_rtt_us_median']} us (median)")
for k, v in med.items():
    pr = v["pair_ratio_median"]
    print(f"  {k:24s} base {v['base']:9.3f}  new {v['new']:9.3f}  new/base {v['new_over_base']:.3f}"
          + (f"  (per pair, median {pr:.3f})" if pr is not None else ""))
EOF
