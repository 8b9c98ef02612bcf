#!/usr/bin/env bash
# The packaged rgpu on a GPU (issue 18): the wheel made from this machine's build (RGPU_PREBUILT,
# scripts/build_wheels.sh; where its packaging tools cannot be installed, no network, the wheel
# pip builds before auditwheel's repair: the same files), installed into a fresh venv that sees
# this machine's torch through a .pth file (as tests/python/test_wheel.py does), then from that
# venv alone: the packaged rgpu-server on the real driver, the driver-API program and the PyTorch
# ladder through the packaged shim (`python -m rgpu.shim`), and rgpu-doctor.
#   tests/gpu/package.sh OUT REAL_LIBCUDA PYTHON
set -uo pipefail
OUT=$1 REAL=$2 PY=$3
cd "$(dirname "$0")/../.."
status=0
wheel=$(RGPU_PREBUILT=build scripts/build_wheels.sh 2>"$OUT/build_wheels.log" | tail -1)
if [ ! -f "$wheel" ]; then
  echo "build_wheels.sh failed (tail of its log below); packaging the unrepaired wheel"
  tail -5 "$OUT/build_wheels.log"
  rm -rf build/wheel-raw
  RGPU_PREBUILT=$PWD/build "$PY" -m pip wheel -q --no-deps --no-build-isolation -w build/wheel-raw ./python \
    >"$OUT/pip_wheel.log" 2>&1 || { tail -20 "$OUT/pip_wheel.log"; exit 1; }
  wheel=$(ls build/wheel-raw/rgpu-*.whl)
fi
echo "wheel: $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
venv=$(mktemp -d /tmp/rgpu-pkg-XXXX)/venv
"$PY" -m venv --without-pip "$venv" || exit 1
site_here=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$PY" -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))" >"$site_here/machine_torch.pth"
"$PY" -m pip --python "$venv/bin/python" install -q --no-deps --no-index "$wheel" >"$OUT/pip_install.log" 2>&1 ||
  "$PY" -m pip install -q --no-deps --no-index --target "$site_here" "$wheel" >>"$OUT/pip_install.log" 2>&1 ||
  { tail -20 "$OUT/pip_install.log"; exit 1; }
export PATH=$venv/bin:$PATH
shim=$("$venv/bin/python" -m rgpu.shim)
echo "packaged: $(command -v rgpu-server) ($(rgpu-server --version)); shim folder $shim"
port=19741
rgpu-server --listen 127.0.0.1:$port --driver "$REAL" >"$OUT/package_server.log" 2>&1 &
server=$!
sleep 1
IMAGE=build/tests/kernels/test_kernels.fatbin
LD_LIBRARY_PATH=$shim RGPU_SERVER=127.0.0.1:$port build/bin/driver_api_test $IMAGE 2>&1 |
  tee "$OUT/package_driver_api.log" | tail -1
[ "${PIPESTATUS[0]}" = 0 ] || status=1
LD_LIBRARY_PATH=$shim RGPU_SERVER=127.0.0.1:$port TRITON_LIBCUDA_PATH=$shim \
  "$venv/bin/python" tests/gpu/torch_ladder.py --out "$OUT/package_torch.json" 2>&1 |
  tee "$OUT/package_torch.log" | grep -E "PASS|FAIL|ladder"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
LD_LIBRARY_PATH=$shim RGPU_SERVER=127.0.0.1:$port rgpu-doctor --python "$venv/bin/python" 2>&1 | tee "$OUT/package_doctor.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
kill $server 2>/dev/null
wait $server 2>/dev/null
exit $status
