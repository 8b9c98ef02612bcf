#!/usr/bin/env bash
# Interleaved driver_bench through the shim: base (before the channel) vs new, on the fake driver.
set -u
OUT=$1; shift
IMAGE=/work/main/build/tests/kernels/test_kernels.fatbin
for pair in 1 2 3 4; do
  for side in base new; do
    if [ $side = base ]; then B=/work/wt/base/build; else B=/work/main/build; fi
    PORT=$((20000 + RANDOM % 20000))
    RT=$(mktemp -d /tmp/rgpu-rt-XXXX)
    $B/bin/rgpu-server --listen 127.0.0.1:$PORT --driver fake --cache-dir none $( [ $side = new ] && echo --runtime-dir $RT ) > $OUT/server-$side-$pair.log 2>&1 &
    SP=$!
    sleep 0.5
    LD_LIBRARY_PATH=$B/lib RGPU_SERVER=127.0.0.1:$PORT RGPU_ANSWER_CACHE=none $B/bin/driver_bench $IMAGE $OUT/$side-$pair.json --quick > /dev/null 2>&1
    kill $SP; wait $SP 2>/dev/null
    rm -rf $RT
  done
done
