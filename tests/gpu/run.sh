#!/usr/bin/env bash
# The GPU test entry point, for the H200 test machine (shared/reference/gpu-machine.md) or any
# machine with an NVIDIA GPU: builds rgpu, runs the end-to-end driver-API program directly on
# the real driver and then through rgpu (shim -> rgpu-server -> real driver), runs the demo,
# and the driver-path benchmark. Logs and results go to $OUT (default ./gpu-results).
#   tests/gpu/run.sh [--quick]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
QUICK=${1:-}
REAL=${RGPU_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
REAL_DIR=$(dirname "$REAL")
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
export PATH=/usr/local/cuda/bin:$PATH
status=0
step() { echo; echo "=== $*"; }

step "build"
nproc_=$(nproc)
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$nproc_"; } >"$OUT/build.log" 2>&1 ||
  { tail -50 "$OUT/build.log"; exit 1; }
echo "built"
nvidia-smi -L

IMAGE=build/tests/kernels/test_kernels.fatbin

step "driver_api_test directly on the real driver"
LD_LIBRARY_PATH=$REAL_DIR build/bin/driver_api_test $IMAGE 2>&1 | tee "$OUT/e2e_local.log" | tail -4
[ "${PIPESTATUS[0]}" = 0 ] || status=1

step "driver_api_test through rgpu (shim -> rgpu-server -> real driver)"
port=19713
build/bin/rgpu-server --listen 127.0.0.1:$port --driver "$REAL" >"$OUT/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
sleep 0.5
LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$port build/bin/driver_api_test $IMAGE 2>&1 |
  tee "$OUT/e2e_rgpu.log" | tail -4
[ "${PIPESTATUS[0]}" = 0 ] || status=1
LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$port RGPU_BATCH=0 build/bin/driver_api_test $IMAGE \
  >"$OUT/e2e_rgpu_nobatch.log" 2>&1 && echo "RGPU_BATCH=0: passed" || { echo "RGPU_BATCH=0: FAILED"; status=1; }

step "demo program through rgpu"
LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$port build/bin/vector_add $IMAGE || status=1
echo "server log (proof the calls were served remotely):"
cat "$OUT/server.log"
kill $server 2>/dev/null
wait $server 2>/dev/null

step "unit and fake-driver tests"
(cd build && ctest -j"$nproc_" -E codegen --output-on-failure >"$OUT/ctest.log" 2>&1) && echo "ctest passed" ||
  { tail -30 "$OUT/ctest.log"; status=1; }

step "nvidia-smi through rgpu's NVML shim (libnvidia-ml.so.1 -> rgpu-server -> real NVML)"
REAL_NVML=${RGPU_REAL_NVML:-$REAL_DIR/libnvidia-ml.so.1}
nport=19714
build/bin/rgpu-server --listen 127.0.0.1:$nport --driver "$REAL" --nvml "$REAL_NVML" >"$OUT/server_nvml.log" 2>&1 &
nserver=$!
sleep 0.5
LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$nport nvidia-smi >"$OUT/nvidia_smi_rgpu.log" 2>&1
smi_rc=$?
cat "$OUT/nvidia_smi_rgpu.log"
if [ $smi_rc = 0 ] && grep -q "H200" "$OUT/nvidia_smi_rgpu.log" && grep -Eq "/ *14[0-9]{4}MiB" "$OUT/nvidia_smi_rgpu.log" &&
  grep -q "prog=nvidia-smi" "$OUT/server_nvml.log"; then
  echo "nvidia-smi through rgpu: passed"
else
  echo "nvidia-smi through rgpu: FAILED (rc $smi_rc; see $OUT/nvidia_smi_rgpu.log, $OUT/server_nvml.log)"
  status=1
fi
LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$nport build/bin/nvml_test 2>&1 | tee "$OUT/nvml_test_rgpu.log" | tail -3
[ "${PIPESTATUS[0]}" = 0 ] || status=1
RGPU_SERVER=127.0.0.1:$nport build/bin/rgpu-smi || status=1
echo "server log:"
cat "$OUT/server_nvml.log"
kill $nserver 2>/dev/null
wait $nserver 2>/dev/null

step "driver-path benchmark"
bench/run_driver_bench.sh $QUICK --driver "$REAL" --out "$OUT" >"$OUT/bench.log" 2>&1 || status=1
cat "$OUT/driver_bench.md" 2>/dev/null || tail -30 "$OUT/bench.log"

echo
[ $status = 0 ] && echo "GPU RUN: ALL PASSED" || echo "GPU RUN: FAILURES (see $OUT)"
exit $status
