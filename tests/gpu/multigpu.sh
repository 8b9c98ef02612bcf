#!/usr/bin/env bash
# Many GPUs (issue 19, "done when"), on a machine with two GPUs, in one command:
#  (a) PyTorch DDP training of GPT-2 small on 2 ranks, one GPU each, NCCL backend
#      (tests/gpu/ddp_train.py): locally, then through rgpu (rgpu's libcuda.so.1 and, by LD_PRELOAD,
#      libnccl.so.2) on one rgpu-server with both GPUs, and on two rgpu-servers with one GPU each
#      (CUDA_VISIBLE_DEVICES on each server, RGPU_SERVER=a,b); then locally again, which shows
#      whether two local runs agree bit for bit at all. Target: each rank's losses identical to the
#      local run's, median step time <= 1.10x local (the faster of the two local runs).
#  (b) a 1 GiB cuMemcpyPeer from server a's GPU to server b's, which the servers stream to each
#      other (tests/gpu/cross_copy_bench.c, best of 3), against raw TCP between the servers'
#      addresses, 127.0.0.1 both (build/bin/tcp_baseline: 1 GiB one way, best of 3). Target >= 0.8x.
# Skips, saying so, with fewer than 2 GPUs. Writes $RESULTS/multigpu.json and .md; exits 1 when a
# run fails or a target is missed.
#   tests/gpu/multigpu.sh RESULTS REAL_LIBCUDA [PYTHON]
#   RGPU_NCCL_LIB=PATH          NVIDIA's libnccl.so.2 for the servers (default: the pip package of PYTHON)
#   RGPU_MULTIGPU_MODEL=gpt2    the model (gpt2, small or tiny: bench/train_bench.py's)
#   RGPU_MULTIGPU_STEPS=30 RGPU_MULTIGPU_WARMUP=5   steps per run, and those left out of the median
#   RGPU_MULTIGPU_ATTENTION=math  attention as PyTorch's math backend, deterministic (auto: PyTorch's
#                               choice, whose fused backward passes are not, so losses cannot repeat)
#   RGPU_MULTIGPU_COPY_BYTES=N  the copy's size (default 1073741824)
#   RGPU_BUILD_DIR=DIR          rgpu's build (default ./build)
#   RGPU_MULTIGPU_FAKE=1        a check of this script's plumbing without a GPU: rgpu-servers on the
#                               fake driver and fake NCCL (RGPU_FAKE_DEVICES=2, RGPU_FAKE_NOOP_KERNELS=1,
#                               as tests/e2e/test_torch_ddp.py), the tiny model, 256 MiB copied, and
#                               "local" is one fake server too. Its numbers mean nothing; only runs
#                               that fail make it exit 1. REAL_LIBCUDA is then ignored.
set -uo pipefail
RESULTS=$1 REAL=$2 PY=${3:-python3}
OUT=$RESULTS/logs
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
BUILD=$(realpath "${RGPU_BUILD_DIR:-build}")
FAKE=${RGPU_MULTIGPU_FAKE:-0}
REAL_DIR=$(dirname "$REAL")
ATTENTION=${RGPU_MULTIGPU_ATTENTION:-math}
# NVLink multicast stays off (the lent machines require it; shared GPUs), locally and in the servers alike.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
if [ "$FAKE" = 1 ]; then
  gpus=2
  MODEL=${RGPU_MULTIGPU_MODEL:-tiny} STEPS=${RGPU_MULTIGPU_STEPS:-8} WARMUP=${RGPU_MULTIGPU_WARMUP:-2}
  BYTES=${RGPU_MULTIGPU_COPY_BYTES:-268435456}
  echo "FAKE DRIVER (RGPU_MULTIGPU_FAKE=1): a check of the plumbing; every number below means nothing"
else
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  MODEL=${RGPU_MULTIGPU_MODEL:-gpt2} STEPS=${RGPU_MULTIGPU_STEPS:-30} WARMUP=${RGPU_MULTIGPU_WARMUP:-5}
  BYTES=${RGPU_MULTIGPU_COPY_BYTES:-1073741824}
fi
if [ "$gpus" -lt 2 ]; then
  why="$gpus GPU(s) here (nvidia-smi -L); DDP on 2 ranks and a copy between two servers' GPUs need 2"
  echo "multigpu: skipped: $why"
  printf '{"skipped": "%s", "gpus": %d}\n' "$why" "$gpus" >"$RESULTS/multigpu.json"
  printf '# Many GPUs (issue 19)\n\nSkipped: %s\n' "$why" >"$RESULTS/multigpu.md"
  exit 0
fi
if [ "$FAKE" != 1 ]; then
  NCCL=${RGPU_NCCL_LIB:-$("$PY" -c 'import glob, site
print(next(iter(sorted(p for d in site.getsitepackages() for p in glob.glob(d + "/nvidia/nccl/lib/libnccl.so.2"))), ""))')}
  [ -n "$NCCL" ] && [ -f "$NCCL" ] || { echo "no NVIDIA libnccl.so.2: pip install nvidia-nccl-cu13 into $PY, or set RGPU_NCCL_LIB"; exit 1; }
fi
echo "$gpus GPUs; DDP: $MODEL, $STEPS steps ($WARMUP warm-up), $ATTENTION attention; copy: $BYTES bytes"
status=0
runs=()

# The copy program, against cuda.h, linked to the shim's libcuda.so (the loader picks the library).
cc -O2 -I"${RGPU_CUDA_INCLUDE:-/usr/local/cuda/include}" -Ibench tests/gpu/cross_copy_bench.c -L"$BUILD/lib" -lcuda \
  -o "$OUT/cross_copy_bench" 2>"$OUT/cross_copy_bench_cc.log" || { echo "cross_copy_bench: does not compile"; cat "$OUT/cross_copy_bench_cc.log"; exit 1; }

# server PORT NAME [VAR=VALUE...]: an rgpu-server on the real driver and NVIDIA's NCCL (or the fakes).
servers_started=()
server() {
  local port=$1 name=$2 rt
  shift 2
  rt=$(mktemp -d /tmp/rgpu-multigpu-XXXX)
  if [ "$FAKE" = 1 ]; then
    env RGPU_FAKE_NOOP_KERNELS=1 "$@" "$BUILD/bin/rgpu-server" --listen 127.0.0.1:"$port" --driver fake \
      --cache-dir none --runtime-dir "$rt" >"$OUT/multigpu_server_$name.log" 2>&1 &
  else
    env LD_LIBRARY_PATH="$REAL_DIR" "$@" "$BUILD/bin/rgpu-server" --listen 127.0.0.1:"$port" --driver "$REAL" \
      --nccl "$NCCL" --runtime-dir "$rt" >"$OUT/multigpu_server_$name.log" 2>&1 &
  fi
  servers_started+=($!)
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && return 0; sleep 0.2; done
  echo "rgpu-server $name did not start:"; tail -5 "$OUT/multigpu_server_$name.log"; exit 1
}
stop_servers() {
  for p in "${servers_started[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  servers_started=()
}
trap stop_servers EXIT

# ddp NAME SERVERS: the two ranks of tests/gpu/ddp_train.py, locally (SERVERS empty) or through rgpu.
master_port=19770
ddp() {
  local name=$1 servers=$2 env pids=() rc=0
  master_port=$((master_port + 1))
  if [ -z "$servers" ]; then
    env=(LD_LIBRARY_PATH="$REAL_DIR")
  else
    env=(LD_LIBRARY_PATH="$BUILD/lib" LD_PRELOAD="$BUILD/lib/libnccl.so.2" RGPU_SERVER="$servers")
    [ "$FAKE" = 1 ] && env+=(RGPU_FAKE_NOOP_KERNELS=1)
  fi
  for rank in 0 1; do
    env "${env[@]}" RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$master_port \
      timeout "${RGPU_MULTIGPU_RANK_TIMEOUT:-900}" "$PY" tests/gpu/ddp_train.py --model "$MODEL" --steps "$STEPS" \
      --warmup "$WARMUP" --attention "$ATTENTION" --out "$OUT/ddp_${name}_rank$rank.json" >"$OUT/ddp_${name}_rank$rank.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ $rc = 0 ]; then
    echo "$name: $(grep -h '^rank ' "$OUT/ddp_${name}"_rank*.log | tr '\n' ';')"
  else
    echo "$name: DDP FAILED"; tail -n 5 "$OUT/ddp_${name}"_rank*.log; status=1
  fi
  runs+=("$name")
}

# The local runs; on the fake, through one fake server with both GPUs (there is no local driver).
if [ "$FAKE" = 1 ]; then
  server 19766 local RGPU_FAKE_DEVICES=2
  local_servers=127.0.0.1:19766
else
  local_servers=
fi
ddp local "$local_servers"
stop_servers

server 19767 one RGPU_FAKE_DEVICES=2
ddp rgpu_one_server 127.0.0.1:19767
stop_servers

# (On the fake, b's device addresses apart from a's, as another host's: RGPU_FAKE_ADDRESS_SLOT.)
server 19768 a CUDA_VISIBLE_DEVICES=0
server 19769 b CUDA_VISIBLE_DEVICES=1 RGPU_FAKE_ADDRESS_SLOT=1
ddp rgpu_two_servers 127.0.0.1:19768,127.0.0.1:19769
# (b) on the same two servers; RGPU_STATS shows the copies' bytes did not pass through the client.
LD_LIBRARY_PATH="$BUILD/lib" RGPU_SERVER=127.0.0.1:19768,127.0.0.1:19769 RGPU_STATS="$OUT/cross_copy_rgpu_stats.json" \
  "$OUT/cross_copy_bench" "$BYTES" >"$OUT/cross_copy_rgpu.json" 2>"$OUT/cross_copy_rgpu.err" &&
  echo "copy between the servers: $(cat "$OUT/cross_copy_rgpu.json")" ||
  { echo "copy between the servers FAILED"; tail -5 "$OUT/cross_copy_rgpu.err"; status=1; }
grep -q "copy link from server" "$OUT/multigpu_server_b.log" ||
  { echo "copy between the servers: b's log shows no copy link from a (the bytes did not go server to server)"; status=1; }
stop_servers

[ "$FAKE" = 1 ] && server 19766 local_again RGPU_FAKE_DEVICES=2
ddp local_again "$local_servers"
stop_servers
if [ "$FAKE" != 1 ]; then  # the local peer copy, for reference (no target)
  LD_LIBRARY_PATH="$REAL_DIR" "$OUT/cross_copy_bench" "$BYTES" >"$OUT/cross_copy_local.json" 2>"$OUT/cross_copy_local.err" ||
    { echo "local peer copy FAILED"; tail -5 "$OUT/cross_copy_local.err"; status=1; }
fi
"$BUILD/bin/tcp_baseline" "$OUT/tcp_baseline.json" >"$OUT/tcp_baseline.log" 2>&1 && cat "$OUT/tcp_baseline.log" ||
  { echo "tcp_baseline FAILED"; tail -5 "$OUT/tcp_baseline.log"; status=1; }

"$PY" - "$RESULTS" "$OUT" "$FAKE" "$gpus" "$MODEL $ATTENTION" "$BYTES" "$status" "${runs[@]}" <<'EOF'
import json, sys
results, out, fake, gpus, model, nbytes, status, names = (sys.argv[1], sys.argv[2], sys.argv[3] == "1",
    int(sys.argv[4]), sys.argv[5], int(sys.argv[6]), int(sys.argv[7]), sys.argv[8:])
model, attention = model.split()
def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None
ddp = {n: [load(f"{out}/ddp_{n}_rank{r}.json") for r in (0, 1)] for n in names}
ddp = {n: rs for n, rs in ddp.items() if all(rs)}
# A job's step is its slower rank's median step.
step = {n: max(r["step_ms_median"] for r in rs) for n, rs in ddp.items()}
local_ms = min((step[n] for n in ("local", "local_again") if n in step), default=None)
def same_losses(n, base="local"):
    return n in ddp and base in ddp and all(a["losses"] == b["losses"] for a, b in zip(ddp[n], ddp[base]))
layouts = {}
for n in ("rgpu_one_server", "rgpu_two_servers"):
    if n in step and local_ms:
        ratio = step[n] / local_ms
        layouts[n] = {"step_ms": round(step[n], 2), "step_ratio": round(ratio, 3), "step_ok": ratio <= 1.10,
                      "losses_identical": same_losses(n), "ok": ratio <= 1.10 and same_losses(n)}
copy, tcp, local_copy = (load(f"{out}/{f}.json") for f in ("cross_copy_rgpu", "tcp_baseline", "cross_copy_local"))
stats = load(f"{out}/cross_copy_rgpu_stats.json")
copy_ratio = copy["gbps"] / tcp["tcp_bulk_gbps"] if copy and tcp and tcp["tcp_bulk_gbps"] > 0 else None
# The client moves its checks' bytes only (up to 2 MiB read back per copy, 4 copies), not the copies:
# staged through it, each copy would be its bytes up and down again.
through_client = stats["bytes_received"] + stats["bytes_sent"] if stats else None
server_to_server = through_client is not None and through_client - 8 * min(nbytes, 1 << 20) < nbytes // 2
doc = {"fake": fake, "gpus": gpus, "model": model, "attention": attention,
       "note": "fake driver: plumbing only, the numbers mean nothing" if fake else "real GPUs",
       "ddp": {n: {"step_ms_per_rank": [r["step_ms_median"] for r in rs], "losses_rank0": rs[0]["losses"]}
               for n, rs in ddp.items()},
       "local_step_ms": local_ms, "local_repeats_bit_for_bit": same_losses("local_again"), "layouts": layouts,
       "copy": {"bytes": nbytes, "rgpu": copy, "local_peer": local_copy, "tcp_baseline": tcp,
                "ratio_to_tcp": round(copy_ratio, 3) if copy_ratio else None,
                "ok": copy_ratio is not None and copy_ratio >= 0.8 and server_to_server,
                "client_bytes": through_client, "server_to_server": server_to_server},
       "targets": "DDP losses identical to local and step <= 1.10x local, on both layouts; "
                  "copy between servers >= 0.8x raw TCP between their addresses (issue 19)"}
missing = [n for n in names if n not in ddp] + (["copy"] if copy is None else []) + (["tcp_baseline"] if tcp is None else [])
doc["ok"] = not missing and len(layouts) == 2 and all(l["ok"] for l in layouts.values()) and doc["copy"]["ok"]
json.dump(doc, open(f"{results}/multigpu.json", "w"), indent=1)
yes = lambda b: "pass" if b else "FAIL"
with open(f"{results}/multigpu.md", "w") as md:
    md.write(f"# Many GPUs (issue 19): {gpus} GPUs, DDP of {model} on 2 ranks ({attention} attention)\n\n")
    if fake:
        md.write("**Fake driver (RGPU_MULTIGPU_FAKE=1): a check of the plumbing; the numbers mean nothing.**\n\n")
    md.write(f"Local step {local_ms and round(local_ms, 2)} ms (the faster of two local runs); the local runs "
             f"{'agree' if doc['local_repeats_bit_for_bit'] else 'DIFFER' if local_ms else 'could not be compared'} bit for bit.\n\n")
    md.write("| layout | step ms | / local (<= 1.10) | losses identical | |\n|---|---|---|---|---|\n")
    for n, l in layouts.items():
        md.write(f"| {n} | {l['step_ms']} | {l['step_ratio']} | {l['losses_identical']} | {yes(l['ok'])} |\n")
    c = doc["copy"]
    md.write(f"\nCopy of {nbytes} bytes from server a's GPU to server b's: "
             f"{copy['gbps'] if copy else '-'} GB/s; raw TCP {tcp['tcp_bulk_gbps'] if tcp else '-'} GB/s; "
             f"ratio {c['ratio_to_tcp']} (>= 0.8): {yes(c['ok'])}. Bytes through the client: {through_client} "
             f"({'server to server' if server_to_server else 'NOT server to server'}). "
             f"Local peer copy: {local_copy['gbps'] if local_copy else '-'} GB/s.\n")
    if missing:
        md.write(f"\nMissing (failed runs): {', '.join(missing)}\n")
    md.write(f"\nmultigpu: {'targets met' if doc['ok'] else 'targets NOT met'}"
             + (" (fake: not judged)" if fake else "") + "\n")
print(open(f"{results}/multigpu.md").read())
# On the fake only the plumbing counts; on GPUs the targets do too.
sys.exit(1 if missing or status or (not fake and not doc["ok"]) else 0)
EOF
rc=$?
[ $rc = 0 ] || status=1
exit $status
