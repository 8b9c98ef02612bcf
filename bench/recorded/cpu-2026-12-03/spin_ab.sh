#!/usr/bin/env bash
# A/B of the server worker's spin (RGPU_TMP_SPIN us) on a loaded 2-core machine.
set -u
OUT=$1; B=/work/main/build; IMAGE=$B/tests/kernels/test_kernels.fatbin
mkdir -p $OUT
spin() { while :; do :; done; }
spin & s1=$!; spin & s2=$!
trap 'kill $s1 $s2 2>/dev/null' EXIT
for pair in 1 2 3 4; do
  for sp in 50 0; do
    PORT=$((20000 + RANDOM % 20000)); RT=$(mktemp -d /tmp/rgpu-rt-XXXX)
    RGPU_TMP_SPIN=$sp $B/bin/rgpu-server --listen 127.0.0.1:$PORT --driver fake --cache-dir none --runtime-dir $RT > /dev/null 2>&1 &
    SP=$!; sleep 0.5
    LD_LIBRARY_PATH=$B/lib RGPU_SERVER=127.0.0.1:$PORT RGPU_ANSWER_CACHE=none $B/bin/driver_bench $IMAGE $OUT/spin$sp-$pair.json --quick >/dev/null 2>&1
    kill $SP; wait $SP 2>/dev/null; rm -rf $RT
  done
done
for f in $OUT/*.json; do python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print(sys.argv[1].split('/')[-1],d['small_sync_call_us'],d['small_sync_call_p99_us'],d['launch_us'])" $f; done
