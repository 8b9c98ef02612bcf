#!/usr/bin/env bash
# Issue 16's loaded bound, before and after in one run: loaded_sync.sh's pairs (a raw TCP round trip,
# tcp_baseline --quick, then driver_bench --quick through the shim on the fake driver, whose small
# synchronous call is cuMemGetInfo) for several builds or settings of rgpu-server, interleaved, the
# order of the variants rotated every round (cpu-2026-12-03 found the order alone can split a run).
#   loaded_ab.sh OUT ROUNDS LOAD NAME=BUILD[:VAR=VALUE] ...
# LOAD: 1 keeps both cores busy with two spinning shell loops (as loaded_sync.sh), 0 runs unloaded.
# Each NAME=BUILD names a build directory (its bin/ and lib/) and, after a colon, one environment
# setting for its rgpu-server (RGPU_INLINE_CALLS=0). Writes OUT/NAME-tcp-R.json, OUT/NAME-rgpu-R.json
# and OUT/summary.json (per variant: each pair, the median ratio to the TCP round trip, the median
# p99/median, the median launch time; the load average before and after).
set -u
OUT=$1
ROUNDS=$2
LOAD=$3
shift 3
VARIANTS=("$@")
mkdir -p "$OUT"
cat /proc/loadavg >"$OUT/loadavg-before"
if [ "$LOAD" = 1 ]; then
  spin() { while :; do :; done; }
  spin & s1=$!
  spin & s2=$!
  trap 'kill $s1 $s2 2>/dev/null' EXIT
fi
n=${#VARIANTS[@]}
for round in $(seq "$ROUNDS"); do
  for k in $(seq 0 $((n - 1))); do
    v=${VARIANTS[$(((k + round) % n))]}
    name=${v%%=*}
    rest=${v#*=}
    build=${rest%%:*}
    setting=
    [ "$rest" != "$build" ] && setting=${rest#*:}
    "$build/bin/tcp_baseline" "$OUT/$name-tcp-$round.json" --quick >/dev/null 2>&1
    PORT=$((20000 + RANDOM % 20000))
    RT=$(mktemp -d /tmp/rgpu-rt-XXXX)
    env $setting "$build/bin/rgpu-server" --listen 127.0.0.1:$PORT --driver fake --cache-dir none --runtime-dir "$RT" \
      >"$OUT/$name-server-$round.log" 2>&1 &
    SP=$!
    sleep 0.5
    LD_LIBRARY_PATH=$build/lib RGPU_SERVER=127.0.0.1:$PORT RGPU_ANSWER_CACHE=none \
      "$build/bin/driver_bench" "$build/tests/kernels/test_kernels.fatbin" "$OUT/$name-rgpu-$round.json" --quick >/dev/null 2>&1
    kill $SP
    wait $SP 2>/dev/null
    rm -rf "$RT"
  done
done
cat /proc/loadavg >"$OUT/loadavg-after"
python3 - "$OUT" "$ROUNDS" "${VARIANTS[@]}" <<'PY'
import json, statistics, sys
out, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
summary = {"load_average_before": open(f"{out}/loadavg-before").read().split()[:3],
           "load_average_after": open(f"{out}/loadavg-after").read().split()[:3], "variants": {}}
for v in variants:
    name = v.split("=", 1)[0]
    rows = []
    for i in range(1, rounds + 1):
        t = json.load(open(f"{out}/{name}-tcp-{i}.json"))
        r = json.load(open(f"{out}/{name}-rgpu-{i}.json"))
        rows.append({"round": i, "tcp_rtt_us": t["tcp_rtt_us"], "sync_us": r["small_sync_call_us"],
                     "sync_p99_us": r["small_sync_call_p99_us"], "ratio": r["small_sync_call_us"] / t["tcp_rtt_us"],
                     "p99_over_median": r["small_sync_call_p99_us"] / r["small_sync_call_us"],
                     "launch_us": r["launch_us"], "launch_sync_us": r["launch_sync_us"]})
    summary["variants"][name] = {
        "setting": v.split("=", 1)[1], "pairs": rows,
        "median_ratio": statistics.median(r["ratio"] for r in rows),
        "median_p99_over_median": statistics.median(r["p99_over_median"] for r in rows),
        "median_sync_us": statistics.median(r["sync_us"] for r in rows),
        "median_tcp_rtt_us": statistics.median(r["tcp_rtt_us"] for r in rows),
        "median_launch_us": statistics.median(r["launch_us"] for r in rows)}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
for name, s in summary["variants"].items():
    print(f"{name:10s} ratio {s['median_ratio']:.2f}  p99/median {s['median_p99_over_median']:.2f}  "
          f"sync {s['median_sync_us']:.2f} us  tcp {s['median_tcp_rtt_us']:.2f} us  launch {s['median_launch_us']:.3f} us")
    print("           per pair: " + ", ".join(f"{r['sync_us']:.1f}/{r['tcp_rtt_us']:.1f}" for r in s["pairs"]))
print("load average before", summary["load_average_before"], "after", summary["load_average_after"])
PY
