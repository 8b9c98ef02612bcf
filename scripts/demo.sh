#!/usr/bin/env bash
# The main job: builds rgpu, starts rgpu-server on loopback, and runs a CUDA program through the
# shim against it. The server uses the real GPU when this machine has one, the fake driver
# otherwise. Prints the program's result.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo runs: the server, the fake driver it falls back to (libfakecuda.so,
# libfakenvml.so), and vector_add with the shim it links (libcuda.so.1) and its kernel image;
# not the ~270 targets of scripts/test.sh, which builds the rest into the same build/ later.
scripts/setup.sh rgpu-server fakecuda fakenvml vector_add

driver=fake
for lib in /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1 /lib/libcuda.so.1; do
  if [ -e "$lib" ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    driver=$lib
    break
  fi
done

port=${RGPU_DEMO_PORT:-9713}
log=build/rgpu-server-demo.log
build/bin/rgpu-server --listen 127.0.0.1:$port --driver "$driver" >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  grep -q "listening on" "$log" && break
  kill -0 $server 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done

echo "demo: rgpu-server on 127.0.0.1:$port serving driver '$driver'"
LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$port \
  build/bin/vector_add build/tests/kernels/test_kernels.fatbin
echo "demo: server log:"
sed 's/^/  /' "$log"
