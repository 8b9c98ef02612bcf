#!/bin/sh
# Runs inside an image build (deploy/containers/*.Containerfile): puts rgpu's programs and shims
# into /opt/rgpu/bin and /opt/rgpu/lib, the one layout every image and the README use, from what
# scripts/build_images.sh put into the build context at /ctx:
#   /ctx/dist/rgpu-*.whl   a wheel of scripts/build_wheels.sh: installed into the venv $RGPU_VENV
#                          (made here, without the wheel's torch requirement: the server and the
#                          shims need no torch); the programs of its rgpu/bin are linked into
#                          /opt/rgpu/bin, and /opt/rgpu/lib is its rgpu/lib (the folder linked,
#                          not each library: the shims find the libraries the wheel carries as
#                          $ORIGIN/../../rgpu.libs, which a link to a file would not lead to);
#   /ctx/stage/opt/rgpu    otherwise, programs and shims copied from a CMake build/.
# With --demo, the demo too (bin/vector_add, share/rgpu/test_kernels.fatbin), from the stage
# either way (the wheel has no demo); without a stage, a warning.
# Usage: install_rgpu.sh [--demo] PROGRAM...  (the programs this image needs; the shims, the fake
# driver and its NVML always come along).
set -eu
demo=0
if [ "${1:-}" = --demo ]; then
  demo=1
  shift
fi
mkdir -p /opt/rgpu/bin /opt/rgpu/share/rgpu
wheel=$(ls /ctx/dist/rgpu-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$wheel" ]; then
  venv=${RGPU_VENV:-/opt/rgpu/venv}
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --no-cache-dir --no-deps --no-index --find-links /ctx/dist rgpu
  pkg=$("$venv/bin/python" -c "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('rgpu').origin))")
  src_bin=$pkg/bin
  src_lib=$pkg/lib
  ln -s "$src_lib" /opt/rgpu/lib
  how="ln -sf"
  from="the wheel $(basename "$wheel")"
else
  src_bin=/ctx/stage/opt/rgpu/bin
  src_lib=/ctx/stage/opt/rgpu/lib
  mkdir -p /opt/rgpu/lib
  how="cp -a"
  from="the CMake build (build/)"
fi
for prog in "$@"; do
  if [ ! -e "$src_bin/$prog" ]; then
    echo "install_rgpu: $from has no $prog; build it (scripts/build_images.sh says how)" >&2
    exit 1
  fi
  $how "$src_bin/$prog" /opt/rgpu/bin/
done
for lib in libcuda.so.1 libnvidia-ml.so.1 libfakecuda.so libfakenvml.so; do
  if [ ! -e "$src_lib/$lib" ]; then
    echo "install_rgpu: $from has no $lib; build it (scripts/build_images.sh says how)" >&2
    exit 1
  fi
  [ -L /opt/rgpu/lib ] || cp -a "$src_lib/$lib" /opt/rgpu/lib/
done
# The unversioned names, for programs that link -lcuda or dlopen "libcuda.so".
ln -sf libcuda.so.1 /opt/rgpu/lib/libcuda.so
ln -sf libnvidia-ml.so.1 /opt/rgpu/lib/libnvidia-ml.so
if [ $demo = 1 ] && [ ! -e /ctx/stage/opt/rgpu/bin/vector_add ]; then
  echo "install_rgpu: warning: no demo (vector_add) in this image: scripts/build_images.sh stages it from a configured build/" >&2
elif [ $demo = 1 ]; then
  cp -a /ctx/stage/opt/rgpu/bin/vector_add /opt/rgpu/bin/
  cp -a /ctx/stage/opt/rgpu/share/rgpu/test_kernels.fatbin /opt/rgpu/share/rgpu/
fi
echo "install_rgpu: /opt/rgpu from $from: $(ls /opt/rgpu/bin | tr '\n' ' ')"
