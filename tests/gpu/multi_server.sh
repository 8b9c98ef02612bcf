#!/usr/bin/env bash
# Several servers on a real GPU (issue 19): two rgpu-servers on this machine's driver, one program
# with RGPU_SERVER=a,b: the program of tests/e2e/test_multi_server.py (a device list of both
# servers' GPUs, each device's context, memory, stream, event, module and function on its own
# server, bytes read back while another server's context is current, mixed calls refused). On one
# GPU both servers show the same GPU; their device addresses come from two processes' address
# spaces, which is what this run looks at (the routing of pointers assumes they do not overlap).
# Then the host side on each server's device (host callbacks, mapped and managed memory), copies
# between the two servers' devices (server to server) and PyTorch's cuda:0 <-> cuda:1.
#   tests/gpu/multi_server.sh OUT REAL_LIBCUDA [PYTHON]
set -uo pipefail
OUT=$1 REAL=$2 PY=${3:-python3}
cd "$(dirname "$0")/../.."
pa=19751 pb=19752
rt=$(mktemp -d /tmp/rgpu-multi-XXXX)
build/bin/rgpu-server --listen 127.0.0.1:$pa --driver "$REAL" --runtime-dir "$rt/a" >"$OUT/multi_server_a.log" 2>&1 &
sa=$!
# (On the fake, as a check of this script: b's addresses apart, as another host's.)
RGPU_FAKE_ADDRESS_SLOT=1 build/bin/rgpu-server --listen 127.0.0.1:$pb --driver "$REAL" --runtime-dir "$rt/b" >"$OUT/multi_server_b.log" 2>&1 &
sb=$!
sleep 1
python3 -c "
import sys; sys.path.insert(0, 'tests/e2e')
from test_multi_server import SCRIPT
open('$rt/multi_server.py', 'w').write(SCRIPT)" || exit 1
SHIM=$PWD/build/lib/libcuda.so.1 IMAGE=$PWD/build/tests/kernels/test_kernels.fatbin \
  LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$pa,127.0.0.1:$pb python3 "$rt/multi_server.py" \
  >"$OUT/multi_server.out" 2>"$OUT/multi_server.err"
rc=$?
cat "$OUT/multi_server.out"
tail -5 "$OUT/multi_server.err"
# Host callbacks, mapped and managed memory on each server's device (test_multi_server.py's
# HOST_SIDE program). Managed memory on the second server may be refused (both drivers placed it
# at one address), saying so; everything else must pass.
python3 -c "
import sys; sys.path.insert(0, 'tests/e2e')
from test_multi_server import HOST_SIDE
open('$rt/host_side.py', 'w').write(HOST_SIDE)" || exit 1
SHIM=$PWD/build/lib/libcuda.so.1 LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$pa,127.0.0.1:$pb \
  timeout 120 python3 "$rt/host_side.py" >"$OUT/multi_host_side.out" 2>"$OUT/multi_host_side.err"
echo "host side on two servers: $(tr '\n' ' ' <"$OUT/multi_host_side.out")"
if grep -q '^DONE$' "$OUT/multi_host_side.out" && ! grep -q ' False' "$OUT/multi_host_side.out" &&
  grep -q '^callbacks 0 1 1 2$' "$OUT/multi_host_side.out" && grep -q '^callbacks 1 1 1 2$' "$OUT/multi_host_side.out" &&
  grep -q '^mapped 1 True True$' "$OUT/multi_host_side.out" && grep -q '^routed True True$' "$OUT/multi_host_side.out"; then
  grep -q '^managed 1 refused$' "$OUT/multi_host_side.out" && grep 'cuMemAllocManaged' "$OUT/multi_host_side.err" | tail -1
else
  tail -5 "$OUT/multi_host_side.err"
  host_side_failed=1
fi
# Copies between the two servers' devices, server to server (tests/e2e/test_multi_server_copy.py's
# program, up to 192 MiB + 3), with the client's byte counts; then PyTorch's cuda:0 <-> cuda:1.
python3 -c "
import sys; sys.path.insert(0, 'tests/e2e')
from test_multi_server_copy import SCRIPT, TORCH_SCRIPT
open('$rt/peer_copy_program.py', 'w').write(SCRIPT)
open('$rt/torch_copy.py', 'w').write(TORCH_SCRIPT)" || exit 1
start=$(date +%s.%N)
SHIM=$PWD/build/lib/libcuda.so.1 LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$pa,127.0.0.1:$pb \
  RGPU_STATS="$OUT/multi_copy_stats.json" python3 "$rt/peer_copy_program.py" 1 12345 16777219 67108863 201326595 \
  >"$OUT/multi_copy.out" 2>"$OUT/multi_copy.err"
echo "copies between servers ($(python3 -c "print(round($(date +%s.%N) - $start, 1))") s):" \
  "$(grep -c ' True$' "$OUT/multi_copy.out") checks true, $(grep -c ' False$' "$OUT/multi_copy.out") false," \
  "$(grep -c '^DONE$' "$OUT/multi_copy.out") done; $(tail -2 "$OUT/multi_copy.out" | head -1);" \
  "client stats: $(python3 -c "import json; s=json.load(open('$OUT/multi_copy_stats.json')); print('sent', s['bytes_sent'], 'received', s['bytes_received'])" 2>/dev/null)"
grep -q '^DONE$' "$OUT/multi_copy.out" && ! grep -q ' False$' "$OUT/multi_copy.out" || { tail -5 "$OUT/multi_copy.err"; copy_failed=1; }
LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$pa,127.0.0.1:$pb "${PY:-python3}" "$rt/torch_copy.py" \
  >"$OUT/multi_torch.out" 2>"$OUT/multi_torch.err"
echo "PyTorch on two servers: $(tr '\n' ' ' <"$OUT/multi_torch.out")"
grep -q '^DONE$' "$OUT/multi_torch.out" && ! grep -q ' False$' "$OUT/multi_torch.out" || { tail -5 "$OUT/multi_torch.err"; copy_failed=1; }
kill $sa $sb 2>/dev/null
wait $sa $sb 2>/dev/null
# Either every device's bytes come back, or (the two servers' device addresses coincide) the
# second device's allocation is refused saying why; never bytes from the wrong GPU.
status=1 how=FAILED
if grep -q '^count 2$' "$OUT/multi_server.out" && grep -q '^bytes 0 True$' "$OUT/multi_server.out" &&
  grep -q '^bytes 1 True$' "$OUT/multi_server.out" && grep -q '^DONE$' "$OUT/multi_server.out"; then
  status=0 how="passed: both servers' memory apart"
elif grep -q '^FAIL alloc: 801$' "$OUT/multi_server.out" && grep -q 'refuses the allocation' "$OUT/multi_server.err"; then
  status=0 how="passed: the servers' device addresses coincide, and the second allocation was refused saying so"
fi
[ "${copy_failed:-0}" = 1 ] && status=1 how="$how; the copies or PyTorch FAILED"
[ "${host_side_failed:-0}" = 1 ] && status=1 how="$how; the host side (callbacks, mapped memory) FAILED"
echo "multi_server: exit $rc, $how"
exit $status
