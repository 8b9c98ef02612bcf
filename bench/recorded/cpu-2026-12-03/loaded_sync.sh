#!/usr/bin/env bash
# Issue 16's bound on a loaded machine: a small synchronous call (driver_bench's cuMemGetInfo)
# through the shim and the channel, against a raw TCP round trip (tcp_baseline) measured in the
# same run, interleaved, with both cores kept busy by two spinning shell loops. Fake driver,
# loopback. Writes OUT/tcp-N.json, OUT/rgpu-N.json and OUT/summary.json.
#   loaded_sync.sh OUT [PAIRS]   (from the repository root, after a build)
set -u
OUT=$1
PAIRS=${2:-4}
B=$PWD/build
IMAGE=$B/tests/kernels/test_kernels.fatbin
mkdir -p "$OUT"
spin() { while :; do :; done; }
spin & s1=$!
spin & s2=$!
trap 'kill $s1 $s2 2>/dev/null' EXIT
for pair in $(seq "$PAIRS"); do
  "$B/bin/tcp_baseline" "$OUT/tcp-$pair.json" --quick >/dev/null 2>&1
  PORT=$((20000 + RANDOM % 20000))
  RT=$(mktemp -d /tmp/rgpu-rt-XXXX)
  "$B/bin/rgpu-server" --listen 127.0.0.1:$PORT --driver fake --cache-dir none --runtime-dir "$RT" >"$OUT/server-$pair.log" 2>&1 &
  SP=$!
  sleep 0.5
  LD_LIBRARY_PATH=$B/lib RGPU_SERVER=127.0.0.1:$PORT RGPU_ANSWER_CACHE=none "$B/bin/driver_bench" "$IMAGE" "$OUT/rgpu-$pair.json" --quick >/dev/null 2>&1
  kill $SP; wait $SP 2>/dev/null
  rm -rf "$RT"
done
python3 - "$OUT" "$PAIRS" <<'PY'
import json, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
rows = []
for i in range(1, pairs + 1):
    t = json.load(open(f"{out}/tcp-{i}.json"))
    r = json.load(open(f"{out}/rgpu-{i}.json"))
    rows.append({"tcp_rtt_us": t["tcp_rtt_us"], "tcp_rtt_p99_us": t["tcp_rtt_p99_us"],
                 "sync_us": r["small_sync_call_us"], "sync_p99_us": r["small_sync_call_p99_us"]})
for row in rows:
    row["ratio"] = row["sync_us"] / row["tcp_rtt_us"] if row["tcp_rtt_us"] else None
    row["p99_over_median"] = row["sync_p99_us"] / row["sync_us"]
summary = {"pairs": rows,
           "median_ratio": statistics.median(r["ratio"] for r in rows),
           "median_p99_over_median": statistics.median(r["p99_over_median"] for r in rows)}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
print(json.dumps(summary, indent=1))
PY
