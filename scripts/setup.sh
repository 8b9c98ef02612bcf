#!/usr/bin/env bash
# Installs what rgpu needs to build and test (Debian packages and PyPI only), then configures and
# builds it into build/. Safe to run again: it installs only what is missing and rebuilds
# incrementally. The CUDA toolkit (for cuda.h and nvcc) must already be present.
#   scripts/setup.sh               builds everything (tests, fuzz smoke targets, benchmarks)
#   scripts/setup.sh TARGET...     builds only those CMake targets (scripts/demo.sh's few programs)
set -euo pipefail
cd "$(dirname "$0")/.."

# A package counts as present if dpkg has it or, for tools, if the command is on PATH (the GPU
# machine has cmake and ninja in a Python venv and no network): apt is only asked for the rest.
# If apt cannot help (no network), say so and go on: the build below fails loudly if something
# it needs is really missing.
need_pkgs=()
# systemd brings systemd-analyze, which checks deploy/systemd's units offline (no running systemd
# needed, ctest deploy_systemd_units).
for p in cmake ninja-build ccache g++ libssl-dev nettle-dev libgtest-dev libcli11-dev liblz4-dev libzstd-dev python3-pip python3-venv openssh-server openssh-client systemd; do
  case $p in
    cmake | g++) command -v "$p" >/dev/null && continue ;;
    ninja-build) command -v ninja >/dev/null && continue ;;
    systemd) command -v systemd-analyze >/dev/null && continue ;;
  esac
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
  echo "setup: installing ${need_pkgs[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null; } ||
    echo "setup: warning: could not install ${need_pkgs[*]} with apt; continuing with what is here" >&2
fi
# The libFuzzer build (bench/fuzz.sh, -DRGPU_FUZZ=ON) when asked: clang and its libFuzzer runtime,
# which fuzz.sh --install-only installs (it knows the runtime's package on Debian and Ubuntu). The
# g++ build runs every fuzz target as a ctest smoke without it.
if [ "${RGPU_SETUP_FUZZ:-0}" = 1 ]; then
  bash bench/fuzz.sh --install-only ||
    echo "setup: warning: could not install clang's libFuzzer runtime; bench/fuzz.sh will not build" >&2
fi
# The docs site's tests (tests/docs/) when asked: MkDocs Material builds the site, Debian's
# Chromium and its driver render it through selenium. scripts/test.sh asks; the demo does not (the
# browser is a download of about 100 MB: 41 s with apt-get update on the 2-core machine).
if [ "${RGPU_SETUP_DOCS:-0}" = 1 ]; then
  docs_pkgs=()
  for p in chromium chromium-driver; do dpkg -s "$p" >/dev/null 2>&1 || docs_pkgs+=("$p"); done
  if ((${#docs_pkgs[@]})); then
    echo "setup: installing ${docs_pkgs[*]} (the docs site's render test)"
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${docs_pkgs[@]}" >/dev/null; } ||
      echo "setup: warning: could not install ${docs_pkgs[*]}; ctest docs_render will skip" >&2
  fi
  python3 -c "import mkdocs, material, selenium" 2>/dev/null ||
    python3 -m pip install -q mkdocs-material selenium 2>/dev/null ||
    python3 -m pip install -q --break-system-packages mkdocs-material selenium 2>/dev/null ||
    echo "setup: warning: could not install mkdocs-material/selenium from PyPI; the docs tests will skip" >&2
fi
# libclang and pytest run the code generator's checks and the tests, kubernetes-validate (the API
# schemas, offline) checks deploy/kubernetes's manifests, prometheus_client's parser reads
# rgpu-server's /metrics in tests/e2e/test_metrics.py; the build needs none of them.
python3 -c "import clang.cindex, pytest, kubernetes_validate, prometheus_client.parser" 2>/dev/null ||
  python3 -m pip install -q libclang pytest kubernetes-validate prometheus-client 2>/dev/null ||
  python3 -m pip install -q --break-system-packages libclang pytest kubernetes-validate prometheus-client 2>/dev/null ||
  echo "setup: warning: could not install libclang/pytest/kubernetes-validate/prometheus-client from PyPI; code generator checks and tests will not run" >&2

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
    python3 -m pip install -q --break-system-packages nvidia-nvml-dev==13.0.87 2>/dev/null ||
    echo "setup: warning: could not install nvml.h; the build needs it for the NVML shim" >&2
fi

# PyTorch (scripts/setup_torch.sh, into .venv/) when asked: scripts/test.sh asks, for the PyTorch
# tests and the rgpu device (opserver/, python/), which build only where torch is found.
if [ "${RGPU_SETUP_TORCH:-0}" = 1 ]; then
  scripts/setup_torch.sh >/dev/null || echo "setup: warning: could not install torch; the PyTorch parts are skipped" >&2
fi
torch_py=()
[ -x .venv/bin/python ] && torch_py=(-DRGPU_TORCH_PYTHON="$PWD/.venv/bin/python")
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${torch_py[@]}" >/dev/null
if (($#)); then
  cmake --build build --target "$@"
else
  cmake --build build
fi
