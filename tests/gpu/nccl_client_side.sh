#!/usr/bin/env bash
# The measurement behind issue 19's NCCL design (docs/design.md §6, "NCCL"): torch.distributed's
# NCCL backend, one rank, (1) locally, (2) through rgpu with NVIDIA's NCCL running in the client
# over the driver shim (libtorch_cuda's RPATH picks the pip libnccl.so.2), (3) through rgpu with
# rgpu's libnccl.so.2 preloaded, forwarding NCCL to the server session. Interleaved twice.
# Writes $RESULTS/nccl_client_side_{local,client,forwarded}_{1,2}.json and a summary line each.
#   tests/gpu/nccl_client_side.sh RESULTS REAL_LIBCUDA [PYTHON]
set -uo pipefail
RESULTS=$1 REAL=$2 PY=${3:-python3}
cd "$(dirname "$0")/../.."
REAL_DIR=$(dirname "$REAL")
mkdir -p "$RESULTS/logs"
NCCL=$("$PY" -c 'import glob, site
print(next(iter(sorted(p for d in site.getsitepackages() for p in glob.glob(d + "/nvidia/nccl/lib/libnccl.so.2"))), ""))')
port=19741
env LD_LIBRARY_PATH="$REAL_DIR" build/bin/rgpu-server --listen 127.0.0.1:$port --driver "$REAL" --nccl "$NCCL" \
  --runtime-dir "$(mktemp -d /tmp/rgpu-ncs-XXXX)" >"$RESULTS/logs/nccl_client_side_server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
for _ in $(seq 50); do grep -q "listening on" "$RESULTS/logs/nccl_client_side_server.log" && break; sleep 0.1; done
status=0
for round in 1 2; do
  for mode in local client forwarded; do
    case $mode in
      local) env=(LD_LIBRARY_PATH="$REAL_DIR") ;;
      client) env=(LD_LIBRARY_PATH="$PWD/build/lib" RGPU_SERVER=127.0.0.1:$port) ;;
      forwarded) env=(LD_LIBRARY_PATH="$PWD/build/lib" RGPU_SERVER=127.0.0.1:$port LD_PRELOAD="$PWD/build/lib/libnccl.so.2") ;;
    esac
    out=$RESULTS/nccl_client_side_${mode}_$round.json
    if env "${env[@]}" RGPU_STATS="$RESULTS/logs/nccl_client_side_${mode}_${round}_stats.json" timeout 300 \
      "$PY" bench/nccl_client_side.py --out "$out" >"$RESULTS/logs/nccl_client_side_${mode}_$round.log" 2>&1; then
      echo "$mode $round: $(grep '^summary:' "$RESULTS/logs/nccl_client_side_${mode}_$round.log")"
    else
      echo "$mode round $round FAILED:"; tail -8 "$RESULTS/logs/nccl_client_side_${mode}_$round.log"; status=1
    fi
  done
done
exit $status
