#!/usr/bin/env bash
# Several servers on a real GPU (issue 19): two rgpu-servers on this machine's driver, one program
# with RGPU_SERVER=a,b: the program of tests/e2e/test_multi_server.py (a device list of both
# servers' GPUs, each device's context, memory, stream, event, module and function on its own
# server, bytes read back while another server's context is current, mixed calls refused). On one
# GPU both servers show the same GPU; their device addresses come from two processes' address
# spaces, which is what this run looks at (the routing of pointers assumes they do not overlap).
#   tests/gpu/multi_server.sh OUT REAL_LIBCUDA
set -uo pipefail
OUT=$1 REAL=$2
cd "$(dirname "$0")/../.."
pa=19751 pb=19752
rt=$(mktemp -d /tmp/rgpu-multi-XXXX)
build/bin/rgpu-server --listen 127.0.0.1:$pa --driver "$REAL" --runtime-dir "$rt/a" >"$OUT/multi_server_a.log" 2>&1 &
sa=$!
build/bin/rgpu-server --listen 127.0.0.1:$pb --driver "$REAL" --runtime-dir "$rt/b" >"$OUT/multi_server_b.log" 2>&1 &
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
echo "multi_server: exit $rc, $how"
exit $status
