#!/usr/bin/env bash
# rgpu-smi suspend / resume / migrate on the real driver: what tests/e2e/test_suspend.py shows on
# the fake, and what only a GPU can show. First tests/gpu/checkpoint_probe.c (the driver's own
# answers to every transition, right and wrong, whether calls block or fail while locked, and
# cuMemGetInfo of another process while checkpointed: the facts fakecuda/checkpoint.cpp guesses
# at). Then a paused reconnect_test through rgpu-server on the real driver is suspended (nvidia-smi
# must no longer list the session's process, and the GPU's used memory must drop), released (it
# must not finish while suspended), resumed (it must finish with the totals of an untouched run);
# with two GPUs, it is moved onto GPU 1 and must finish alike.
#   tests/gpu/suspend.sh OUT_DIR REAL_DRIVER [NVML]   (from the repository root, after a build;
#       tests/gpu/run.sh runs it as its step "suspend"; NVML: the server's --nvml, for a dry run on
#       the fake: tests/gpu/suspend.sh /tmp/out build/lib/libfakecuda.so build/lib/libfakenvml.so)
set -uo pipefail
OUT=$1
REAL=$2
NVML=(${3:+--nvml "$3"})
status=0
IMAGE=build/tests/kernels/test_kernels.fatbin

echo "--- the driver's checkpoint API from a second process (tests/gpu/checkpoint_probe.c)"
if cc -I/usr/local/cuda/include tests/gpu/checkpoint_probe.c -o "$OUT/checkpoint_probe" \
    -L/usr/local/cuda/lib64/stubs -lcuda -lpthread; then
  LD_LIBRARY_PATH=$(dirname "$REAL") timeout 120 "$OUT/checkpoint_probe" >"$OUT/checkpoint_probe.log" 2>&1 || status=1
  grep "^fact" "$OUT/checkpoint_probe.log"
  # The same program on the fake driver: where the lines differ (times and memory sizes aside),
  # fakecuda/checkpoint.cpp answers otherwise than the real driver and should be fixed.
  mkdir -p "$OUT/fakelib"
  ln -sfn "$PWD/build/lib/libfakecuda.so" "$OUT/fakelib/libcuda.so.1"
  LD_LIBRARY_PATH=$OUT/fakelib timeout 120 "$OUT/checkpoint_probe" >"$OUT/checkpoint_probe_fake.log" 2>&1
  strip() { grep "^fact" "$1" | sed -E 's/ in [0-9.]+ s//; s/free [0-9]+ MiB of [0-9]+ MiB/free N MiB/; s/tid [0-9]+ \(child pid [0-9]+\)/tid T/; s/[0-9]+ calls in/N calls in/; s/uuid first bytes [0-9a-f]+/uuid U/'; }
  echo "--- the real driver (<) and the fake (>) where they differ:"
  diff <(strip "$OUT/checkpoint_probe.log") <(strip "$OUT/checkpoint_probe_fake.log") || true
else
  status=1
fi

port=19715
build/bin/rgpu-server --listen 127.0.0.1:$port --driver "$REAL" "${NVML[@]}" >"$OUT/server_suspend.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
sleep 0.5
export LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$port RGPU_HEARTBEAT=1
expected=$(timeout 120 build/bin/reconnect_test $IMAGE 3 | grep '^rounds')
echo "untouched run: $expected"

# Starts reconnect_test, paused after its first round, in the background: sets client, go, log, pid.
run_paused() {
  go=$OUT/go.$1
  log=$OUT/paused.$1.log
  rm -f "$go"
  timeout 300 build/bin/reconnect_test $IMAGE 3 "$go" >"$log" 2>&1 &
  client=$!
  pid=
  for _ in $(seq 100); do
    pid=$(build/bin/rgpu-smi | awk '/prog=reconnect_test/ {print $2; exit}')
    [ -n "$pid" ] && break
    sleep 0.1
  done
  [ -n "$pid" ] || { echo "FAILED: the paused client's session never appeared in rgpu-smi"; status=1; }
}

finish_like_untouched() {  # $1: what happened to it
  touch "$go"
  wait "$client" || { echo "FAILED: the client failed after $1:"; tail -5 "$log"; status=1; }
  got=$(grep '^rounds' "$log")
  if [ "$got" = "$expected" ]; then echo "$1: finished byte-exact"; else echo "FAILED after $1: '$got'"; status=1; fi
  grep -q reconnecting "$log" && { echo "FAILED: the client reconnected (a pause must not break the connection)"; status=1; }
}

used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>/dev/null | tr '\n' ' '; }
listed() { nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -qx "$1"; }

echo "--- suspend, release, resume"
run_paused suspend
if [ -n "$pid" ]; then
  echo "session $pid: listed by nvidia-smi: $(listed "$pid" && echo yes || echo no); GPU memory used: $(used)"
  build/bin/rgpu-smi suspend "$pid" || status=1
  build/bin/rgpu-smi | grep "pid $pid"
  echo "suspended: listed by nvidia-smi: $(listed "$pid" && echo yes || echo no); GPU memory used: $(used)"
  listed "$pid" && { echo "FAILED: nvidia-smi still lists the suspended session's process"; status=1; }
  touch "$go"
  sleep 4
  grep -q '^rounds' "$log" && { echo "FAILED: the client finished while its session was suspended"; status=1; }
  again=$(build/bin/rgpu-smi suspend "$pid" 2>&1)
  [[ $again == *"already suspended"* ]] || { echo "FAILED: a second suspend said: $again"; status=1; }
  build/bin/rgpu-smi resume "$pid" || status=1
  echo "resumed: listed by nvidia-smi: $(listed "$pid" && echo yes || echo no); GPU memory used: $(used)"
  finish_like_untouched "suspend and resume"
fi

echo "--- migrate"
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
  run_paused migrate
  if [ -n "$pid" ]; then
    build/bin/rgpu-smi migrate "$pid" --gpu 1 || status=1
    nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | grep "^$pid," || true
    finish_like_untouched "migrate onto GPU 1"
  fi
else
  echo "migrate: not run (one GPU here; it needs two of one kind)"
fi
exit $status
