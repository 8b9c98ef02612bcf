#!/usr/bin/env bash
# Runs a device_printf program (tests/cuda/device_printf.cu) and checks its output: each of the
# kernel's lines exactly once, all before the host's marker line, the program's own PASS last and
# exit status 0. Prints "PASS" or "FAIL: why" as the last line; exits 0 only on PASS.
#   tests/cuda/check_printf.sh PROGRAM      (RGPU_PRINTF_TIMEOUT seconds, default 60)
set -uo pipefail
prog=${1:?usage: check_printf.sh PROGRAM}
blocks=3 threads=4  # as in device_printf.cu
out=$(timeout "${RGPU_PRINTF_TIMEOUT:-60}" "$prog" 2>&1)
rc=$?
printf '%s\n' "$out"
fail() { echo "FAIL: $*"; exit 1; }
[ $rc = 0 ] || fail "the program exited with status $rc"
[ "$(printf '%s\n' "$out" | tail -1)" = PASS ] || fail "the program's last line is not PASS"
marker=$(printf '%s\n' "$out" | grep -n -m1 -x 'rgpu-printf host marker after cudaDeviceSynchronize' | cut -d: -f1)
[ -n "$marker" ] || fail "no marker line"
missing=0
for ((b = 0; b < blocks; b++)); do
  for ((t = 0; t < threads; t++)); do
    line="rgpu-printf block $b thread $t value $((b * 1000 + t * 7 + 3))"
    at=$(printf '%s\n' "$out" | grep -n -x -F "$line" | cut -d: -f1)
    count=$(printf '%s\n' "$at" | grep -c .)
    if [ "$count" != 1 ]; then
      echo "line '$line' appears $count times"; missing=$((missing + 1))
    elif [ "$at" -gt "$marker" ]; then
      echo "line '$line' comes after the marker (line $at > $marker)"; missing=$((missing + 1))
    fi
  done
done
extra=$(printf '%s\n' "$out" | grep -c '^rgpu-printf block ')
[ $missing = 0 ] || fail "$missing of $((blocks * threads)) device lines missing, repeated or late"
[ "$extra" = $((blocks * threads)) ] || fail "$extra device lines, $((blocks * threads)) expected"
echo "PASS"
