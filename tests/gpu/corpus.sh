#!/usr/bin/env bash
# The tests/cuda corpus on a GPU machine: every program there (static and shared cudart, and the
# per-thread-default-stream build) run directly on the real driver, then through rgpu (shim ->
# rgpu-server -> real driver), each with a timeout. One line per program and path,
#   PASS name path            or    FAIL name path (why: ...last lines of its output)
# then a summary. Exits 1 if any program fails through rgpu while passing directly (or, when
# there is no real driver to run directly on, fails through rgpu at all); 2 if it cannot start.
#
#   tests/gpu/corpus.sh [BUILD_DIR] [NAME_SUBSTRING...]     (BUILD_DIR default: build)
#
# Environment:
#   RGPU_SERVER        an rgpu-server already running (host:port); otherwise one is started here
#                      on a free loopback port with --driver $RGPU_REAL_DRIVER, and stopped at exit
#   RGPU_REAL_DRIVER   the real libcuda.so.1 (default /usr/local/nvidia/lib64/libcuda.so.1, as run.sh)
#   CORPUS_TIMEOUT     seconds per program and path (default 120)
#   OUT                logs go to $OUT/corpus/ (default ./gpu-results/logs)
# device_printf_* are run through tests/cuda/check_printf.sh, which checks their printed lines.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" 2>/dev/null && pwd) || { echo "corpus.sh: no build directory ${1:-$ROOT/build}" >&2; exit 2; }
shift || true
FILTERS=("$@")
REAL=${RGPU_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
REAL_DIR=$(dirname "$REAL")
CUDA_LIB=${CUDA_HOME:-/usr/local/cuda}/lib64
TIMEOUT=${CORPUS_TIMEOUT:-120}
LOGS=${OUT:-$PWD/gpu-results/logs}/corpus
mkdir -p "$LOGS"

programs=()
for p in "$BUILD"/tests/cuda/*_static "$BUILD"/tests/cuda/*_shared; do
  [ -x "$p" ] || continue
  name=$(basename "$p")
  if [ ${#FILTERS[@]} -gt 0 ]; then
    keep=0
    for f in "${FILTERS[@]}"; do [[ "$name" == *"$f"* ]] && keep=1; done
    [ $keep = 1 ] || continue
  fi
  programs+=("$p")
done
[ ${#programs[@]} -gt 0 ] || { echo "corpus.sh: no programs in $BUILD/tests/cuda (build target rgpu_cuda_programs)" >&2; exit 2; }
[ -e "$BUILD/lib/libcuda.so.1" ] || { echo "corpus.sh: no shim at $BUILD/lib/libcuda.so.1" >&2; exit 2; }

# The server: the one given, or our own on a free port (retried if the port is taken meanwhile).
SERVER_PID=""
SERVER_LOG=""
stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null
  fi
  [ -n "$SERVER_PID" ] && wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=""
}
start_server() {
  [ -x "$BUILD/bin/rgpu-server" ] || { echo "corpus.sh: no $BUILD/bin/rgpu-server" >&2; exit 2; }
  [ -e "$REAL" ] || { echo "corpus.sh: no real driver at $REAL (set RGPU_REAL_DRIVER, or RGPU_SERVER)" >&2; exit 2; }
  SERVER_LOG=$LOGS/rgpu-server.log
  for _ in 1 2 3; do
    local port
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$BUILD/bin/rgpu-server" --listen "127.0.0.1:$port" --driver "$REAL" >>"$SERVER_LOG" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      if grep -q "listening on 127.0.0.1:$port" "$SERVER_LOG" 2>/dev/null; then
        ADDR=127.0.0.1:$port
        return 0
      fi
      sleep 0.1
    done
    stop_server
  done
  echo "corpus.sh: rgpu-server did not start; its log:" >&2
  cat "$SERVER_LOG" >&2
  exit 2
}
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if [ -n "${RGPU_SERVER:-}" ]; then
  ADDR=$RGPU_SERVER
  echo "corpus: through the running rgpu-server at $ADDR"
else
  unset RGPU_TOKEN  # our server and its clients run without one (the server would read it too)
  start_server
  echo "corpus: through rgpu-server at $ADDR (--driver $REAL, log $SERVER_LOG)"
fi
have_direct=1
[ -e "$REAL" ] || { have_direct=0; echo "corpus: no real driver at $REAL: direct runs skipped"; }
echo "corpus: ${#programs[@]} programs, ${TIMEOUT}s each per path, logs in $LOGS"

# why LOG RC: the status and the first FAIL line and last lines of the output, on one line.
why() {
  local log=$1 rc=$2 what
  case $rc in
    124 | 137) what="timed out after ${TIMEOUT}s" ;;
    *) if [ "$rc" -gt 128 ]; then what="killed by signal $((rc - 128))"; else what="exit $rc"; fi ;;
  esac
  local first_fail last
  first_fail=$(grep -m1 '^FAIL' "$log" 2>/dev/null)
  # Blank lines and the shell's own crash report (the status says it) are left out.
  lines() { grep -v -e '^[[:space:]]*$' -e 'corpus\.sh: line [0-9]*: ' "$log" 2>/dev/null | tail -3; }
  last=$(lines | tr '\n' '|' | sed 's/|$//; s/|/ | /g')
  if [ -n "$first_fail" ] && ! lines | grep -qxF "$first_fail"; then
    last="$first_fail | ... | $last"
  fi
  printf '%s: %s' "$what" "${last:-(no output)}" | cut -c1-400
}

sessions() {
  if [ -n "$SERVER_LOG" ] && [ -f "$SERVER_LOG" ]; then grep -c "session for .* started" "$SERVER_LOG"; else echo 0; fi
}

# run NAME PATH PROGRAM: runs it on PATH (direct|rgpu), prints its line, returns its status.
run() {
  local name=$1 path=$2 prog=$3 log="$LOGS/${1}_$2.log" rc before
  local cmd=(timeout -k 10 "$TIMEOUT" "$prog")
  if [[ "$name" == device_printf_* ]]; then
    cmd=(env RGPU_PRINTF_TIMEOUT="$TIMEOUT" "$ROOT/tests/cuda/check_printf.sh" "$prog")
  fi
  before=$(sessions)
  if [ "$path" = direct ]; then
    (LD_LIBRARY_PATH=$REAL_DIR:$CUDA_LIB "${cmd[@]}"; exit $?) >"$log" 2>&1  # a subshell: a crash is reported in the log
  else
    (LD_LIBRARY_PATH=$BUILD/lib:$CUDA_LIB RGPU_SERVER=$ADDR "${cmd[@]}"; exit $?) >"$log" 2>&1
  fi
  rc=$?
  if [ $rc = 0 ] && [ "$path" = rgpu ] && [ -n "$SERVER_PID" ] && [ "$(sessions)" = "$before" ]; then
    echo "FAIL $name $path (why: exit 0 but rgpu-server saw no session: the program did not go through rgpu)"
    return 1
  fi
  if [ $rc = 0 ]; then
    echo "PASS $name $path"
  else
    echo "FAIL $name $path (why: $(why "$log" $rc))"
  fi
  if [ "$path" = rgpu ] && [ -n "$SERVER_PID" ] && ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "     rgpu-server died during $name (log $SERVER_LOG); starting another"
    SERVER_PID=""
    start_server
  fi
  return $rc
}

direct_pass=0 direct_fail=0 rgpu_pass=0 rgpu_fail=0 regressions=() rgpu_only_pass=0
for prog in "${programs[@]}"; do
  name=$(basename "$prog")
  d=skip
  if [ $have_direct = 1 ]; then
    if run "$name" direct "$prog"; then d=pass; direct_pass=$((direct_pass + 1)); else d=fail; direct_fail=$((direct_fail + 1)); fi
  fi
  if run "$name" rgpu "$prog"; then
    rgpu_pass=$((rgpu_pass + 1))
    [ $d = fail ] && rgpu_only_pass=$((rgpu_only_pass + 1))
  else
    rgpu_fail=$((rgpu_fail + 1))
    [ $d = fail ] || regressions+=("$name")
  fi
done

echo
summary="corpus summary: ${#programs[@]} programs; direct $direct_pass pass, $direct_fail fail"
[ $have_direct = 1 ] || summary+=" (not run)"
summary+="; rgpu $rgpu_pass pass, $rgpu_fail fail; ${#regressions[@]} fail only through rgpu"
[ $rgpu_only_pass = 0 ] || summary+="; $rgpu_only_pass pass only through rgpu (look at them)"
echo "$summary"
if [ ${#regressions[@]} -gt 0 ]; then
  echo "fail only through rgpu: ${regressions[*]}"
  exit 1
fi
exit 0
