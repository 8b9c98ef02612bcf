#!/bin/sh
# Runs a tests/e2e program directly on the real driver (CTest's NAME_real tests, label gpu): the
# directory of RGPU_REAL_DRIVER (default /usr/local/nvidia/lib64/libcuda.so.1) first on the
# library path, where its libnvidia-ml.so.1 is too. Without a real driver: exit 77 (CTest:
# skipped), unless RGPU_REAL_DRIVER names one, when a missing driver is a failure.
real=${RGPU_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
if [ ! -e "$real" ]; then
  if [ -n "${RGPU_REAL_DRIVER:-}" ]; then echo "run_real.sh: no real driver at $real" >&2; exit 1; fi
  echo "run_real.sh: no real driver at $real (set RGPU_REAL_DRIVER): skipped"
  exit 77
fi
unset RGPU_SERVER
LD_LIBRARY_PATH=$(dirname "$real") exec "$@"
