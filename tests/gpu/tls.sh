#!/usr/bin/env bash
# Issue 17 on the GPU: the driver-API program and PyTorch CUDA training through the shim over TLS
# 1.3 (rgpu-server --tls auto, the client pinning the fingerprint it printed), beside the same over
# plain TCP: the training's losses must be identical and its step time is compared, plain and TLS
# interleaved (tests/gpu/train_losses.py prints each step's time with its losses).
#   tests/gpu/tls.sh OUT_DIR REAL_DRIVER [PYTHON]   (from the repository root, after a build;
#       tests/gpu/run.sh runs it as its step "tls". A dry run on the fake, whose no-op kernels
#       make both runs' losses alike: RGPU_FAKE_NOOP_KERNELS=1 tests/gpu/tls.sh /tmp/out
#       build/lib/libfakecuda.so .venv/bin/python)
set -uo pipefail
OUT=$1
REAL=$2
PY=${3:-python3}
STEPS=${RGPU_TLS_STEPS:-40}
IMAGE=build/tests/kernels/test_kernels.fatbin
status=0
state=$(mktemp -d /tmp/rgpu-tls-XXXX)
export CUBLAS_WORKSPACE_CONFIG=:4096:8
start() {  # start PORT ARGS...: sets server
  local port=$1; shift
  build/bin/rgpu-server --listen 127.0.0.1:$port --driver "$REAL" "$@" >>"$OUT/server_tls_$port.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && return 0; sleep 0.1; done
  echo "rgpu-server did not start on $port"; return 1
}
start 19718 || exit 1
plain=$server
start 19719 --tls auto --state-dir "$state" || exit 1
tls=$server
trap 'kill $plain $tls 2>/dev/null; rm -rf "$state"' EXIT
fp=$(grep -o 'fingerprint sha256:[0-9a-f]*' "$OUT/server_tls_19719.log" | head -1 | cut -d' ' -f2)
echo "TLS server's fingerprint: $fp"
export LD_LIBRARY_PATH=$PWD/build/lib
TLS_ENV=(RGPU_SERVER=tls://127.0.0.1:19719 RGPU_TLS_FINGERPRINT=$fp)

env "${TLS_ENV[@]}" build/bin/driver_api_test $IMAGE >"$OUT/tls_driver_api.log" 2>&1 &&
  echo "driver_api_test over TLS: $(tail -1 "$OUT/tls_driver_api.log")" ||
  { echo "driver_api_test over TLS: FAILED"; tail -5 "$OUT/tls_driver_api.log"; status=1; }
# Without the pin the certificate is refused, and the message shows the fingerprint.
RGPU_SERVER=tls://127.0.0.1:19719 RGPU_CONNECT_TIMEOUT=5 build/bin/driver_api_test $IMAGE >"$OUT/tls_unpinned.log" 2>&1 &&
  { echo "unpinned: FAIL: it connected"; status=1; } ||
  { grep -q "$fp" "$OUT/tls_unpinned.log" && echo "unpinned: refused, naming the fingerprint" ||
      { echo "unpinned: FAIL: the refusal does not name $fp"; tail -3 "$OUT/tls_unpinned.log"; status=1; }; }

# Training, plain and TLS interleaved twice.
for round in 1 2; do
  RGPU_SERVER=127.0.0.1:19718 timeout 600 "$PY" tests/gpu/train_losses.py "$STEPS" --times "$OUT/tls_plain_$round.times" >"$OUT/tls_plain_$round.json" 2>"$OUT/tls_plain_$round.err"
  env "${TLS_ENV[@]}" timeout 600 "$PY" tests/gpu/train_losses.py "$STEPS" --times "$OUT/tls_tls_$round.times" >"$OUT/tls_tls_$round.json" 2>"$OUT/tls_tls_$round.err"
done
"$PY" - "$OUT" <<'EOF' || status=1
import json, statistics, sys
out = sys.argv[1]
runs = {k: [json.load(open(f"{out}/tls_{k}_{r}.json")) for r in (1, 2)] for k in ("plain", "tls")}
times = {k: [json.load(open(f"{out}/tls_{k}_{r}.times")) for r in (1, 2)] for k in runs}
same = all(r["losses"] == runs["plain"][0]["losses"] for k in runs for r in runs[k])
step = {k: statistics.median(t for r in times[k] for t in r[2:]) * 1e3 for k in runs}
print(f"training over TLS: losses {'identical to' if same else 'DIFFER from'} plain TCP's; median step "
      f"{step['tls']:.2f} ms over TLS, {step['plain']:.2f} ms plain ({step['tls'] / step['plain']:.3f}x)")
json.dump({"step_ms": step, "losses_identical": same}, open(f"{out}/tls_train.json", "w"))
sys.exit(0 if same else 1)
EOF
exit $status
