#!/usr/bin/env bash
# Runs the driver-path benchmarks and writes OUT/driver_bench.{json,md}: the raw TCP loopback
# floor (tcp_baseline), driver_bench against the real driver ("local", only with a real --driver
# path), and driver_bench through rgpu's shim to an rgpu-server on a free loopback port ("rgpu").
# bench/report.py merges the three and checks the project's ratio targets. See bench/README.md.
#
# Usage: bench/run_driver_bench.sh [--quick] [--driver PATH|fake] [--out DIR] [--delay-ms D]
#   --delay-ms D: the rgpu run goes through rgpu-delay-proxy, adding D ms to every round trip
#   (the TCP baseline and the local run do not; their ratios then show the cost of distance).
# Env:   RGPU_BUILD_DIR (default <repo>/build), RGPU_BENCH_IMAGE (default the tests/kernels fatbin)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${RGPU_BUILD_DIR:-$ROOT/build}"
QUICK=""
DRIVER="fake"
OUT="$ROOT/bench/results"
DELAY_MS=""

usage() { sed -n '7p' "${BASH_SOURCE[0]}" | sed 's/^# //'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK="--quick"; shift ;;
    --driver) DRIVER="${2:?--driver needs PATH or fake}"; shift 2 ;;
    --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
    --delay-ms) DELAY_MS="${2:?--delay-ms needs milliseconds}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_driver_bench: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

IMAGE="${RGPU_BENCH_IMAGE:-$BUILD/tests/kernels/test_kernels.fatbin}"
for f in "$BUILD/bin/driver_bench" "$BUILD/bin/tcp_baseline" "$BUILD/bin/rgpu-server" "$BUILD/lib/libcuda.so.1" "$IMAGE"; do
  if [[ ! -e "$f" ]]; then
    echo "run_driver_bench: $f is missing; build first: cmake --build $BUILD" >&2
    exit 1
  fi
done
if [[ "$DRIVER" != "fake" && ! -e "$DRIVER" ]]; then
  echo "run_driver_bench: --driver $DRIVER does not exist (give the real libcuda.so.1, or 'fake')" >&2
  exit 1
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
rm -f "$OUT"/tcp_baseline.json "$OUT"/local.json "$OUT"/rgpu.json

SERVER_PID=""
CHILD_PID=""
PROXY_PID=""
# Runs a benchmark in the background and waits, so that INT/TERM reach the traps at once
# instead of after the benchmark; the EXIT trap then ends it and the server.
run() {
  "$@" &
  CHILD_PID=$!
  local rc=0
  wait "$CHILD_PID" || rc=$?
  CHILD_PID=""
  return "$rc"
}
cleanup() {
  if [[ -n "$CHILD_PID" ]]; then kill "$CHILD_PID" 2>/dev/null || true; fi
  if [[ -n "$PROXY_PID" ]]; then kill "$PROXY_PID" 2>/dev/null || true; fi
  stop_server
}
stop_server() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts rgpu-server on a free port; retries when another process takes the port first.
start_server() {
  local log="$OUT/rgpu-server.log"
  for _ in 1 2 3; do
    PORT="$(free_port)"
    "$BUILD/bin/rgpu-server" --listen "127.0.0.1:$PORT" --driver "$DRIVER" >"$log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      # Its "listening on" line, not a probe connection (that would log an aborted handshake).
      if grep -q "listening on 127.0.0.1:$PORT" "$log" 2>/dev/null; then return 0; fi
      sleep 0.1
    done
    stop_server
  done
  echo "run_driver_bench: rgpu-server did not start; its log:" >&2
  cat "$log" >&2
  exit 1
}

echo "== tcp_baseline"
run "$BUILD/bin/tcp_baseline" "$OUT/tcp_baseline.json" $QUICK

if [[ "$DRIVER" != "fake" ]]; then
  echo "== driver_bench local ($DRIVER)"
  run env LD_LIBRARY_PATH="$(dirname "$DRIVER")" RGPU_BENCH_MODE=local \
    "$BUILD/bin/driver_bench" "$IMAGE" "$OUT/local.json" $QUICK
else
  echo "== driver_bench local: skipped (--driver fake: no real driver to compare with)"
fi

echo "== driver_bench through rgpu (server --driver $DRIVER${DELAY_MS:+, +$DELAY_MS ms round trip})"
start_server
TARGET_PORT=$PORT
if [[ -n "$DELAY_MS" ]]; then
  PROXY_PORT="$(free_port)"
  "$BUILD/bin/rgpu-delay-proxy" --listen "127.0.0.1:$PROXY_PORT" --target "127.0.0.1:$PORT" --delay-ms "$DELAY_MS" \
    >"$OUT/delay-proxy.log" 2>&1 &
  PROXY_PID=$!
  sleep 0.3
  TARGET_PORT=$PROXY_PORT
fi
if ! run env -u RGPU_TOKEN LD_LIBRARY_PATH="$BUILD/lib" RGPU_SERVER="127.0.0.1:$TARGET_PORT" RGPU_BENCH_MODE=rgpu \
  "$BUILD/bin/driver_bench" "$IMAGE" "$OUT/rgpu.json" $QUICK; then
  echo "run_driver_bench: driver_bench through rgpu failed; the server's log ($OUT/rgpu-server.log) ends:" >&2
  tail -n 20 "$OUT/rgpu-server.log" >&2
  exit 1
fi
sleep 0.2 # let the server log the end of the session
stop_server

python3 "$ROOT/bench/report.py" --out "$OUT" --driver "$DRIVER" --build "$BUILD" --server-log "$OUT/rgpu-server.log" \
  "$OUT/tcp_baseline.json" "$OUT/local.json" "$OUT/rgpu.json"
if [[ -n "$DELAY_MS" && -f "$OUT/driver_bench.md" ]]; then
  printf '\nThe rgpu run went through rgpu-delay-proxy adding %s ms to every round trip; the TCP baseline and\nthe local run did not, so the ratios above measure distance as well as rgpu.\n' "$DELAY_MS" \
    >>"$OUT/driver_bench.md"
fi
