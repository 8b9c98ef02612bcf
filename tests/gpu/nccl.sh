#!/usr/bin/env bash
# NCCL through rgpu on real GPUs (issue 19 item 4; docs/design.md §6, "NCCL"): rgpu's
# libnccl.so.2 forwards the NCCL API to NVIDIA's NCCL in each rank's rgpu-server session.
# Runs tests/e2e/nccl_test.c (every collective checked byte for byte) and tests/gpu/nccl_bench.c
# (all-reduce from 8 B to 1 GiB, nccl-tests' bus bandwidth), each locally on NVIDIA's libraries and
# through rgpu: with one GPU, 1 rank (bus bandwidth is then 0 by definition; the time per call is
# what compares); with 2 or more, 2 ranks on one server with both GPUs, and 2 ranks on two servers
# with one GPU each (once as NCCL chooses its transport, once with NCCL_P2P_DISABLE=1
# NCCL_SHM_DISABLE=1: sockets only, as between two hosts). Writes $RESULTS/nccl.json and .md.
#   tests/gpu/nccl.sh RESULTS REAL_LIBCUDA [PYTHON]
#   RGPU_NCCL_LIB=PATH   NVIDIA's libnccl.so.2 (default: the nvidia-nccl-cu13 pip package of PYTHON)
#   RGPU_NCCL_MAX_BYTES  the sweep's largest size (default 1073741824)
set -uo pipefail
RESULTS=$1 REAL=$2 PY=${3:-python3}
OUT=$RESULTS/logs
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
REAL_DIR=$(dirname "$REAL")
MAX=${RGPU_NCCL_MAX_BYTES:-1073741824}
NCCL=${RGPU_NCCL_LIB:-$("$PY" -c 'import glob, site
print(next(iter(sorted(p for d in site.getsitepackages() for p in glob.glob(d + "/nvidia/nccl/lib/libnccl.so.2"))), ""))')}
[ -n "$NCCL" ] && [ -f "$NCCL" ] || { echo "no NVIDIA libnccl.so.2: pip install nvidia-nccl-cu13 into $PY, or set RGPU_NCCL_LIB"; exit 1; }
NCCL_DIR=$(dirname "$NCCL")
gpus=$(nvidia-smi -L | grep -c '^GPU')
ranks=$([ "$gpus" -ge 2 ] && echo 2 || echo 1)
note=$([ "$gpus" -ge 2 ] && echo "2 ranks, one per GPU" || echo "one GPU: 1 rank only (bus bandwidth is 0 for one rank; compare the times)")
echo "NCCL $NCCL, $gpus GPU(s): $note"
status=0
runs=()

# run NAME SERVERS: nccl_test and nccl_bench, locally (SERVERS empty) or through rgpu.
run() {
  local name=$1 servers=$2 env
  if [ -z "$servers" ]; then
    env=(LD_LIBRARY_PATH="$NCCL_DIR:$REAL_DIR")
  else
    env=(LD_LIBRARY_PATH="$PWD/build/lib" RGPU_SERVER="$servers")
  fi
  env "${env[@]}" build/bin/nccl_test "$ranks" >"$OUT/nccl_test_$name.log" 2>&1 &&
    echo "$name: nccl_test passed ($(grep -c ' 0 failed' "$OUT/nccl_test_$name.log") ranks)" ||
    { echo "$name: nccl_test FAILED"; tail -5 "$OUT/nccl_test_$name.log"; status=1; }
  env "${env[@]}" build/bin/nccl_bench "$ranks" "$MAX" >"$OUT/nccl_bench_$name.jsonl" 2>"$OUT/nccl_bench_$name.err" ||
    { echo "$name: nccl_bench FAILED"; tail -5 "$OUT/nccl_bench_$name.err"; status=1; }
  runs+=("$name")
}

# server PORT NAME [VAR=VALUE...]: an rgpu-server on the real driver and NVIDIA's NCCL.
servers_started=()
server() {
  local port=$1 name=$2
  shift 2
  env LD_LIBRARY_PATH="$REAL_DIR" "$@" build/bin/rgpu-server --listen 127.0.0.1:"$port" --driver "$REAL" --nccl "$NCCL" \
    --runtime-dir "$(mktemp -d /tmp/rgpu-nccl-XXXX)" >"$OUT/nccl_server_$name.log" 2>&1 &
  servers_started+=($!)
}
stop_servers() {
  for p in "${servers_started[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  servers_started=()
}
trap stop_servers EXIT

run local ""
server 19761 one
sleep 1
run rgpu_one_server 127.0.0.1:19761
stop_servers
if [ "$gpus" -ge 2 ]; then
  server 19762 a CUDA_VISIBLE_DEVICES=0
  server 19763 b CUDA_VISIBLE_DEVICES=1
  sleep 1
  run rgpu_two_servers 127.0.0.1:19762,127.0.0.1:19763
  stop_servers
  server 19764 a CUDA_VISIBLE_DEVICES=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
  server 19765 b CUDA_VISIBLE_DEVICES=1 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
  sleep 1
  run rgpu_two_servers_sockets 127.0.0.1:19764,127.0.0.1:19765
  stop_servers
  # The same sockets-only transport locally, for its ratio.
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 run local_sockets ""
fi

"$PY" - "$RESULTS" "$OUT" "$gpus" "$ranks" "$note" "${runs[@]}" <<'EOF'
import json, sys
results, out, gpus, ranks, note, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6:]
runs = {}
for n in names:
    try:
        runs[n] = [json.loads(l) for l in open(f"{out}/nccl_bench_{n}.jsonl") if l.startswith("{")]
    except OSError:
        runs[n] = []
def ratio(run, base):
    b = {r["bytes"]: r for r in runs.get(base, [])}
    return [{"bytes": r["bytes"], "time_ratio_local_over_rgpu": round(b[r["bytes"]]["us"] / r["us"], 3)}
            for r in runs.get(run, []) if r["bytes"] in b and r["us"] > 0]
ratios = {n: ratio(n, "local_sockets" if n.endswith("sockets") else "local") for n in names if n.startswith("rgpu")}
doc = {"gpus": gpus, "ranks": ranks, "note": note, "runs": runs, "ratios": ratios,
       "target": ">= 0.8x local bus bandwidth for >= 64 MiB on one server (issue 19)"}
json.dump(doc, open(f"{results}/nccl.json", "w"), indent=1)
with open(f"{results}/nccl.md", "w") as md:
    md.write(f"# NCCL all-reduce through rgpu ({note})\n\n| bytes | " + " | ".join(f"{n} busbw GB/s (us)" for n in names) + " |\n")
    md.write("|---" * (len(names) + 1) + "|\n")
    sizes = sorted({r["bytes"] for rs in runs.values() for r in rs})
    for s in sizes:
        cells = []
        for n in names:
            r = next((r for r in runs[n] if r["bytes"] == s), None)
            cells.append(f"{r['busbw_gbs']:.2f} ({r['us']:.0f})" if r else "-")
        md.write(f"| {s} | " + " | ".join(cells) + " |\n")
print(open(f"{results}/nccl.md").read())
EOF
exit $status
