#!/usr/bin/env bash
# Training-step benchmark through rgpu against the local GPU, same machine, same run (issue 4):
# bench/train_bench.py for the small 6-layer model and GPT-2 small, locally and through rgpu at
# each added round-trip delay (rgpu-delay-proxy), then bench/train_report.py writes
# OUT/train_bench.{json,md}. Needs a GPU, torch, and a build (build/).
#   bench/run_train_bench.sh --driver /usr/local/nvidia/lib64/libcuda.so.1 [--out DIR] [--delays "0 1 30"]
#   [--models "small gpt2"] [--pairs N]
# --pairs N: also N interleaved pairs per model (local, rgpu at 0 ms and rgpu at the largest
#   delay, all warm; local first in odd pairs, last in even ones), whose medians give the ratio
#   and the times to first step least moved by the host's own drift (a launch-bound model's local
#   step time swings by more than its 10% target between identical runs on the H200 hosts).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${RGPU_BUILD_DIR:-$ROOT/build}"
DRIVER=/usr/local/nvidia/lib64/libcuda.so.1
OUT="$ROOT/bench/results"
DELAYS="0 1 30"
MODELS="small gpt2"
PAIRS=0
PY=${RGPU_TORCH_PYTHON:-python3}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --driver) DRIVER=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --delays) DELAYS=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --pairs) PAIRS=$2; shift 2 ;;
    *) echo "run_train_bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT/train"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
"$BUILD/bin/rgpu-server" --listen 127.0.0.1:$port --driver "$DRIVER" --cache-dir "$OUT/train/module-cache" >"$OUT/train/server.log" 2>&1 &
server=$!
proxy=""
trap 'kill $server $proxy 2>/dev/null' EXIT
sleep 0.5
steps_for() { case "$1:$2" in *:30) echo 8 ;; gpt2:*) echo 30 ;; *) echo 40 ;; esac; }
# One run of train_bench.py on the local GPU: MODEL NAME (its result: OUT/train/NAME.json).
run_local() {
  RGPU_BENCH_T0=$(date +%s.%N) LD_LIBRARY_PATH=$(dirname "$DRIVER") "$PY" "$ROOT/bench/train_bench.py" --model "$1" \
    --steps "$(steps_for "$1" 0)" --out "$OUT/train/$2.json" 2>&1 | tail -1
}
# One run through rgpu, warm unless the answer cache was removed: MODEL NAME SERVER DELAY LINES
# [VAR=VALUE...] (LINES: how many of its last output lines to show; then extra environment).
run_rgpu() {
  local m=$1 name=$2 target=$3 d=$4 lines=$5
  shift 5
  env RGPU_BENCH_T0="$(date +%s.%N)" LD_LIBRARY_PATH="$BUILD/lib" RGPU_SERVER="$target" TRITON_LIBCUDA_PATH="$BUILD/lib" \
    RGPU_ANSWER_CACHE="$OUT/train/answers.txt" "$@" "$PY" "$ROOT/bench/train_bench.py" --model "$m" \
    --steps "$(steps_for "$m" "$d")" --warmup 3 --out "$OUT/train/$name.json" 2>&1 | tail -"$lines"
}
# Starts rgpu-delay-proxy adding DELAY ms in front of the server: sets pport and proxy.
start_proxy() {
  pport=$(free_port)
  "$BUILD/bin/rgpu-delay-proxy" --listen 127.0.0.1:$pport --target 127.0.0.1:$port --delay-ms "$1" >"$OUT/train/$2" 2>&1 &
  proxy=$!
  sleep 0.3
}
stop_proxy() { [ -n "$proxy" ] && { kill $proxy 2>/dev/null; wait $proxy 2>/dev/null; proxy=""; }; }
for m in $MODELS; do
  run_local $m ${m}_local
  for d in $DELAYS; do
    target=127.0.0.1:$port
    if [ "$d" != 0 ]; then
      start_proxy "$d" "proxy_$d.log"
      target=127.0.0.1:$pport
    fi
    # Twice: the first run fills the server's module cache and the client's answer cache
    # (client/answer_store.h; cold), the second finds them warm.
    for run in cold warm; do
      [ "$run" = cold ] && [ "$d" != 0 ] && continue  # cold start measured at 0 ms only
      [ "$run" = cold ] && rm -f "$OUT/train/answers.txt"
      run_rgpu $m ${m}_rgpu_${d}ms_$run $target "$d" 2 RGPU_STATS="$OUT/train/${m}_rgpu_${d}ms_$run.stats.json"
    done
    stop_proxy
  done
  # Interleaved pairs: local, then rgpu at 0 ms, then (with a delay given) rgpu at the largest
  # delay, each warm: medians of each give step ratios and times to first step least moved by drift.
  far=$(for d in $DELAYS; do echo "$d"; done | sort -n | tail -1)
  [ "$PAIRS" -gt 0 ] && [ "$far" != 0 ] && start_proxy "$far" proxy_pairs.log
  # Odd pairs run local first, even pairs last (ABBA), so a host that speeds up or slows down
  # through the pairs (page cache, clocks) moves local and rgpu alike.
  for ((i = 1; i <= PAIRS; i++)); do
    ((i % 2)) && run_local $m ${m}_pair${i}_local
    run_rgpu $m ${m}_pair${i}_rgpu 127.0.0.1:$port 0 1
    [ -n "$proxy" ] && run_rgpu $m ${m}_pair${i}_rgpu${far}ms 127.0.0.1:$pport "$far" 1
    ((i % 2)) || run_local $m ${m}_pair${i}_local
  done
  stop_proxy
  # Local again, after the rgpu runs: the spread between the two local runs says how much of a
  # ratio is the machine's own noise (bench/train_report.py).
  run_local $m ${m}_local_again
done
"$PY" "$ROOT/bench/train_report.py" "$OUT/train" "$OUT"
