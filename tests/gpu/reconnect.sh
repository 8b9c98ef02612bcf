#!/usr/bin/env bash
# Issue 16 on the GPU: PyTorch CUDA training through the shim keeps its exact losses across a
# broken network and a restarted rgpu-server. tests/gpu/train_losses.py (a small GPT, deterministic)
# runs three times through rgpu-server on the real driver:
#   1. uncut;
#   2. through rgpu-faultproxy, its connection cut 10 times at random points (seeded);
#   3. paused after step 0 while the listening rgpu-server is killed (-9) and a new one started on
#      the same port, then its connection cut: it resumes on the new server's hand-over.
# Runs 2 and 3 must print the losses of run 1, to the bit, and must have reconnected.
#   tests/gpu/reconnect.sh OUT_DIR REAL_DRIVER [PYTHON]   (from the repository root, after a build;
#       tests/gpu/run.sh runs it as its step "reconnect". A dry run of the mechanics on the fake,
#       whose no-op kernels make every run's losses alike: RGPU_FAKE_NOOP_KERNELS=1
#       tests/gpu/reconnect.sh /tmp/out build/lib/libfakecuda.so .venv/bin/python)
set -uo pipefail
OUT=$1
REAL=$2
PY=${3:-python3}
STEPS=${RGPU_RECONNECT_STEPS:-60}
status=0
port=19716
runtime=$(mktemp -d /tmp/rgpu-rt-XXXX)
export CUBLAS_WORKSPACE_CONFIG=:4096:8
start_server() {
  build/bin/rgpu-server --listen 127.0.0.1:$port --driver "$REAL" --runtime-dir "$runtime" >>"$OUT/server_reconnect.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && return 0; sleep 0.1; done
  echo "rgpu-server did not start"; return 1
}
client() {  # client SERVER_ADDR NAME [PAUSE_FILE]
  LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=$1 timeout 600 "$PY" tests/gpu/train_losses.py "$STEPS" ${3:-} \
    >"$OUT/reconnect_$2.json" 2>"$OUT/reconnect_$2.err"
}
same() {  # same NAME: its losses are the uncut run's
  if cmp -s "$OUT/reconnect_uncut.json" "$OUT/reconnect_$1.json" && [ -s "$OUT/reconnect_$1.json" ]; then
    echo "$1: losses identical to the uncut run ($STEPS steps); $(grep -c reconnecting "$OUT/reconnect_$1.err") reconnects"
    [ "$(grep -c reconnecting "$OUT/reconnect_$1.err")" -ge 1 ] || { echo "$1: FAIL: it never reconnected"; status=1; }
  else
    echo "$1: FAIL: losses differ from the uncut run (or it failed): see $OUT/reconnect_$1.{json,err}"
    tail -5 "$OUT/reconnect_$1.err"
    status=1
  fi
}
trap 'kill $server $proxy 2>/dev/null; rm -rf "$runtime"' EXIT
proxy=

start_server || exit 1
client 127.0.0.1:$port uncut || { echo "uncut run failed:"; tail -20 "$OUT/reconnect_uncut.err"; exit 1; }
echo "uncut: $(head -c 120 "$OUT/reconnect_uncut.json")..."

# 2. Ten cuts: the proxy's own readiness check is its connection 1; connections 2..11 are cut.
pport=19717
build/bin/rgpu-faultproxy --listen 127.0.0.1:$pport --target 127.0.0.1:$port --fault cut --after-bytes 200000 \
  --after-bytes-max 4000000 --seed 5 --connections 11 2>"$OUT/proxy_cuts.log" &
proxy=$!
sleep 0.5; (exec 3<>/dev/tcp/127.0.0.1/$pport) 2>/dev/null
client 127.0.0.1:$pport cuts
same cuts
kill $proxy; wait $proxy 2>/dev/null

# 3. The listening server killed and restarted while the client waits; then its connection cut.
build/bin/rgpu-faultproxy --listen 127.0.0.1:$pport --target 127.0.0.1:$port --fault cut --on-signal \
  --connections 2 2>"$OUT/proxy_restart.log" &
proxy=$!
sleep 0.5; (exec 3<>/dev/tcp/127.0.0.1/$pport) 2>/dev/null
rm -f "$OUT/go" "$OUT/go.ready"
client 127.0.0.1:$pport restart "$OUT/go" &
cpid=$!
for _ in $(seq 1200); do [ -e "$OUT/go.ready" ] && break; sleep 0.1; done  # step 0 done: it waits for go
kill -9 $server; wait $server 2>/dev/null
for _ in $(seq 50); do start_server && kill -0 $server 2>/dev/null && break; sleep 0.2; done
kill -USR1 $proxy
touch "$OUT/go"
wait $cpid
same restart
grep -q "resumes session" "$OUT/server_reconnect.log" || { echo "restart: FAIL: no 'resumes session' in the server log"; status=1; }
exit $status
