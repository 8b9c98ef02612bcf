#!/usr/bin/env bash
# Installs what rgpu needs to build and test (Debian packages and PyPI only), then configures and
# builds it into build/. Safe to run again: it installs only what is missing and rebuilds
# incrementally. The CUDA toolkit (for cuda.h and nvcc) must already be present.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
for p in cmake ninja-build g++ libssl-dev libgtest-dev libcli11-dev liblz4-dev libzstd-dev python3-pip; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
  echo "setup: installing ${need_pkgs[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
python3 -c "import clang.cindex, pytest" 2>/dev/null ||
  python3 -m pip install -q libclang pytest 2>/dev/null ||
  python3 -m pip install -q --break-system-packages libclang pytest

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$CUDA_HOME/include/cuda.h" ]; then
  echo "setup: cannot find cuda.h under $CUDA_HOME/include; install the CUDA toolkit or set CUDA_HOME" >&2
  exit 1
fi
export PATH="$CUDA_HOME/bin:$PATH"
# nvml.h (NVML shim, fake NVML, server handlers): the toolkit's, or the matching PyPI package's.
if [ ! -f "$CUDA_HOME/include/nvml.h" ] && [ ! -f "$CUDA_HOME/targets/x86_64-linux/include/nvml.h" ] &&
  ! python3 -c "import sysconfig,os,sys; sys.exit(not os.path.isfile(sysconfig.get_paths()['purelib']+'/nvidia/cu13/include/nvml.h'))"; then
  echo "setup: installing nvml.h (nvidia-nvml-dev)"
  python3 -m pip install -q nvidia-nvml-dev==13.0.87 2>/dev/null ||
    python3 -m pip install -q --break-system-packages nvidia-nvml-dev==13.0.87
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
