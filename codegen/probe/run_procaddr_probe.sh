#!/usr/bin/env bash
# Produces the cuGetProcAddress table from the real driver (run on the GPU machine):
#   codegen/probe/run_procaddr_probe.sh [LIBCUDA] > gen/proc_address.txt
# Names: every base name of gen/entry_points.txt plus every cu* symbol the driver exports.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=${1:-/usr/local/nvidia/lib64/libcuda.so.1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O1 -o "$tmp/probe" "$here/procaddr_probe.c" -ldl
{
  sed -E 's/_(ptds|ptsz)$//; s/_v[0-9]+$//' "$here/../../gen/entry_points.txt"
  nm -D --defined-only "$lib" | awk '$3 ~ /^cu/ {print $3}' | sed -E 's/_(ptds|ptsz)$//; s/_v[0-9]+$//'
} | sort -u >"$tmp/names"
"$tmp/probe" "$lib" "$tmp/names"
