#!/usr/bin/env bash
# Training-step benchmark through rgpu against the local GPU, same machine, same run (issue 4):
# bench/train_bench.py for the small 6-layer model and GPT-2 small, locally and through rgpu at
# each added round-trip delay (rgpu-delay-proxy), cold (a server with an empty module cache, no
# client answer cache or NVRTC cache) and warm (all filled by the cold run), then bench/train_report.py writes
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
# The server every warm run uses; each cold run gets a server of its own with an empty module
# cache (start_server), whose images are then copied into this one's, so a cold run is cold
# whatever ran before it (the two models share most of PyTorch's kernels).
# Starts rgpu-server: NAME CACHE_DIR; sets sport and spid (its log: OUT/train/NAME.log).
start_server() {
  sport=$(free_port)
  "$BUILD/bin/rgpu-server" --listen 127.0.0.1:$sport --driver "$DRIVER" --cache-dir "$2" >"$OUT/train/$1.log" 2>&1 &
  spid=$!
  sleep 0.5
}
stop_pid() { [ -n "$1" ] && { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }; }
start_server server "$OUT/train/module-cache"
port=$sport server=$spid
proxy="" cold_server=""
trap 'kill $server $proxy $cold_server 2>/dev/null' EXIT
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
    RGPU_ANSWER_CACHE="$OUT/train/answers.txt" RGPU_NVRTC_CACHE="$OUT/train/nvrtc" "$@" "$PY" "$ROOT/bench/train_bench.py" --model "$m" \
    --steps "$(steps_for "$m" "$d")" --warmup 3 --out "$OUT/train/$name.json" 2>&1 | tail -"$lines"
}
# Starts rgpu-delay-proxy adding DELAY ms in front of the server at PORT: DELAY LOG PORT; sets
# pport and proxy.
start_proxy() {
  pport=$(free_port)
  "$BUILD/bin/rgpu-delay-proxy" --listen 127.0.0.1:$pport --target 127.0.0.1:$3 --delay-ms "$1" >"$OUT/train/$2" 2>&1 &
  proxy=$!
  sleep 0.3
}
stop_proxy() { stop_pid "$proxy"; proxy=""; }
# Sets target, the address a run at DELAY ms uses to reach the server at PORT: DELAY PORT LOG
# (through a new proxy when DELAY is not 0: stop_proxy after).
reach() { if [ "$1" = 0 ]; then target=127.0.0.1:$2; else start_proxy "$1" "$3" "$2"; target=127.0.0.1:$pport; fi; }
for m in $MODELS; do
  run_local $m ${m}_local
  for d in $DELAYS; do
    # Cold: a fresh server (empty module cache), no client answer cache and no NVRTC cache; then
    # warm: the shared server with the cold run's images, and the answers and NVRTC compiles the
    # cold run kept (client/answer_store.h, client/dark_api/nvrtc_cache.cpp).
    rm -rf "$OUT/train/cold-cache" "$OUT/train/answers.txt" "$OUT/train/nvrtc"
    start_server cold_server_${m}_${d}ms "$OUT/train/cold-cache"
    cold_server=$spid
    reach "$d" $sport "proxy_${d}ms_cold.log"
    run_rgpu $m ${m}_rgpu_${d}ms_cold $target "$d" 2 RGPU_STATS="$OUT/train/${m}_rgpu_${d}ms_cold.stats.json"
    stop_proxy
    stop_pid "$cold_server"
    cold_server=""
    cp -p "$OUT/train/cold-cache/"* "$OUT/train/module-cache/" 2>/dev/null
    reach "$d" $port "proxy_${d}ms.log"
    run_rgpu $m ${m}_rgpu_${d}ms_warm $target "$d" 2 RGPU_STATS="$OUT/train/${m}_rgpu_${d}ms_warm.stats.json"
    stop_proxy
  done
  # Interleaved pairs: local, rgpu at 0 ms and (with a delay given) rgpu at the largest delay,
  # each warm: medians of each give step ratios and times to first step least moved by drift.
  far=$(for d in $DELAYS; do echo "$d"; done | sort -n | tail -1)
  [ "$PAIRS" -gt 0 ] && [ "$far" != 0 ] && start_proxy "$far" proxy_pairs.log $port
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
