#!/usr/bin/env bash
# The driver path of two builds, A B A B on one machine: driver_bench through each build's shim
# and rgpu-server, and the raw TCP round trip (tcp_baseline) beside each pair, so that a change's
# cost is read against the commit before it in the same run (issue 16: "against the commit before
# it, same machine, same run, interleaved"). Writes OUT/{base,new}-N.json, OUT/tcp-N.json and
# OUT/pairs.json (per pair and the medians: the small synchronous call, launch, launch + sync,
# 8-byte copies, bulk bandwidth, and new/base).
#   bench/pair_driver_bench.sh BASE_BUILD NEW_BUILD OUT [--driver PATH|fake] [--pairs N] [--quick] [--tls-new|--tls]
#                              [--pin SERVER_CPUS:CLIENT_CPUS]
# --pin: both sides' servers run on SERVER_CPUS and clients on CLIENT_CPUS (taskset lists, e.g.
# 2-5:6-9), so that a pair's two runs differ in what is measured, not in where the scheduler put
# them (unpinned, one small call's pair ratios on the H100 host ranged 0.80x to 1.28x).
# --tls-new: the new side's server runs with `--tls auto` and its client dials tls:// with the
# fingerprint pinned (issue 17: TLS against plain TCP, one build given twice); --tls: both sides.
# RGPU_PAIR_BASE_ENV, RGPU_PAIR_NEW_ENV: VAR=VALUE words for that side's rgpu-server (one build
# given twice, e.g. RGPU_PAIR_BASE_ENV=RGPU_INLINE_CALLS=0 to time a setting).
# Each build needs bin/rgpu-server, bin/driver_bench and lib/libcuda.so.1; the kernel image and
# tcp_baseline are NEW_BUILD's.
set -uo pipefail
BASE=$1 NEW=$2 OUT=$3
shift 3
DRIVER=fake PAIRS=4 QUICK="" TLS_NEW=0 TLS_BASE=0 PIN_SERVER=() PIN_CLIENT=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --driver) DRIVER=$2; shift 2 ;;
    --pairs) PAIRS=$2; shift 2 ;;
    --quick) QUICK=--quick; shift ;;
    --tls-new) TLS_NEW=1; shift ;;
    --tls) TLS_NEW=1 TLS_BASE=1; shift ;;
    --pin) PIN_SERVER=(taskset -c "${2%%:*}") PIN_CLIENT=(taskset -c "${2#*:}"); shift 2 ;;
    *) echo "pair_driver_bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
IMAGE=$NEW/tests/kernels/test_kernels.fatbin
one() {  # one SIDE BUILD PAIR
  local port=$((20000 + RANDOM % 20000)) rt
  rt=$(mktemp -d /tmp/rgpu-rt-XXXX)
  # --runtime-dir only where the build knows it (the commit before the channel does not).
  local extra=() client=(RGPU_SERVER=127.0.0.1:$port) tls=0
  "$2/bin/rgpu-server" --help 2>&1 | grep -q -- --runtime-dir && extra=(--runtime-dir "$rt")
  [ "$1" = new ] && [ $TLS_NEW = 1 ] && tls=1 && extra+=(--tls auto --state-dir "$rt/state")
  [ "$1" = base ] && [ $TLS_BASE = 1 ] && tls=1 && extra+=(--tls auto --state-dir "$rt/state")
  local server_env
  [ "$1" = base ] && read -ra server_env <<<"${RGPU_PAIR_BASE_ENV:-}" || read -ra server_env <<<"${RGPU_PAIR_NEW_ENV:-}"
  "${PIN_SERVER[@]}" env "${server_env[@]}" "$2/bin/rgpu-server" --listen 127.0.0.1:$port --driver "$DRIVER" --cache-dir none "${extra[@]}" \
    >"$OUT/server-$1-$3.log" 2>&1 &
  local sp=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
  if [ $tls = 1 ]; then
    client=(RGPU_SERVER=tls://127.0.0.1:$port
      RGPU_TLS_FINGERPRINT="$(grep -o 'fingerprint sha256:[0-9a-f]*' "$OUT/server-$1-$3.log" | head -1 | cut -d' ' -f2)")
  fi
  "${PIN_CLIENT[@]}" env LD_LIBRARY_PATH=$2/lib "${client[@]}" RGPU_ANSWER_CACHE=none \
    "$2/bin/driver_bench" "$IMAGE" "$OUT/$1-$3.json" $QUICK >"$OUT/$1-$3.txt" 2>&1 || echo "$1 pair $3: driver_bench failed"
  kill $sp; wait $sp 2>/dev/null
  rm -rf "$rt"
}
for p in $(seq "$PAIRS"); do
  "${PIN_CLIENT[@]}" "$NEW/bin/tcp_baseline" "$OUT/tcp-$p.json" $QUICK >/dev/null 2>&1
  # Alternate which side goes first, so neither always runs on a machine the other just warmed.
  if ((p % 2)); then one base "$BASE" $p; one new "$NEW" $p; else one new "$NEW" $p; one base "$BASE" $p; fi
done
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
