#!/usr/bin/env bash
# The GPU test entry point, for the H200 test machine (docs/reference/gpu-machine.md) or any
# machine with an NVIDIA GPU: builds rgpu, runs the end-to-end driver-API program directly on
# the real driver and then through rgpu (shim -> rgpu-server -> real driver), runs the demo,
# the NVML shim under nvidia-smi, the runtime-needs program, the CUDA runtime/library corpus
# (tests/cuda), NVIDIA's cuda-samples if .samples/ holds them, and the driver-path benchmark.
# Results go to $OUT (default ./gpu-results): driver_bench.{md,json} and gpu-logs.tgz.
#   tests/gpu/run.sh [--quick]       RGPU_GPU_CTEST=1 also runs ctest there; RGPU_GPU_BENCH=0 skips the benchmark
#   RGPU_GPU_STEPS=core,runtime,conformance,corpus,samples,nvml,suspend,multiserver,nccl,multigpu,package,reconnect,tls,torch,torchdev,torchstep,bench,abbench,startup,train
#                                  the steps to run (default: all but abbench)
#   RGPU_AB_PAIRS=N                abbench and tls: A B pairs of bench/pair_driver_bench.sh (default 3)
#   RGPU_SAME_PAIRS=N              tls: programs timing the small call over TLS and plain TCP at once (default 9)
#   RGPU_AB_SPIN=1                 abbench: a second A B A B with RGPU_SPIN=1 (common/spin_policy.h)
#   RGPU_GPU_BASE_TREE=DIR         abbench: the source tree of the commit to compare against (e.g. from
#                                  `git archive BASE | tar -x -C DIR`); it is built in DIR/build-base and its
#                                  driver path timed against this one's, A B A B (bench/pair_driver_bench.sh)
#   RGPU_MULTIGPU_MODEL=gpt2 ...   the multigpu step's settings (tests/gpu/multigpu.sh: DDP on 2 GPUs,
#                                  a copy between two servers; skipped with fewer than 2 GPUs)
#   RGPU_STARTUP_MODEL=small|gpt2   the model the startup step runs (default small)
#   RGPU_TRAIN_DELAYS="0 30"  RGPU_TRAIN_MODELS="small"   what the training benchmark runs (default "0 1 30", "small gpt2")
#   RGPU_TRAIN_PAIRS=N             interleaved local/rgpu pairs per model at 0 ms (default 3; 0 for none)
#   RGPU_GPU_CORPUS="NAME..."      runs only the corpus programs whose names contain one of NAME
#   RGPU_GPU_SAMPLES=REGEX         runs only the samples matching REGEX
#   RGPU_GPU_TRACE_SAMPLES=REGEX   also runs the samples matching REGEX through rgpu with RGPU_TRACE=2
#                                  (logs in samples_trace.tsv.logs/), to see which call fails
# Nettle (small TLS records, protocol/tls_records.cpp): the test machine has the library but not
# its headers; carry them in .deps/include (cp -r /usr/include/nettle .deps/include/ on a machine
# with nettle-dev; .deps is ignored by git) and the build finds them there.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-results}
RESULTS=$OUT
OUT=$RESULTS/logs  # every log goes here; packed into $RESULTS/gpu-logs.tgz at the end
mkdir -p "$OUT"
QUICK=${1:-}
REAL=${RGPU_REAL_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
REAL_DIR=$(dirname "$REAL")
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
export PATH=/usr/local/cuda/bin:$PATH
status=0
step() { echo; echo "=== $*"; }
STEPS=",${RGPU_GPU_STEPS:-core,runtime,conformance,corpus,samples,nvml,suspend,multiserver,nccl,multigpu,package,reconnect,tls,torch,torchdev,torchstep,bench,startup,train},"
want() { [[ $STEPS == *",$1,"* ]]; }

step "build"
nproc_=$(nproc)
if [ ! -e /usr/include/nettle/gcm.h ] && [ -e .deps/include/nettle/gcm.h ]; then
  export CMAKE_INCLUDE_PATH=$PWD/.deps/include
fi
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$nproc_"; } >"$OUT/build.log" 2>&1 ||
  { tail -50 "$OUT/build.log"; exit 1; }
echo "built"
nvidia-smi -L

IMAGE=build/tests/kernels/test_kernels.fatbin

if want core; then
step "driver_api_test directly on the real driver"
LD_LIBRARY_PATH=$REAL_DIR build/bin/driver_api_test $IMAGE 2>&1 | tee "$OUT/e2e_local.log" | tail -4
[ "${PIPESTATUS[0]}" = 0 ] || status=1

step "driver_api_test through rgpu (shim -> rgpu-server -> real driver)"
port=19713
build/bin/rgpu-server --listen 127.0.0.1:$port --driver "$REAL" >"$OUT/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
sleep 0.5
LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$port build/bin/driver_api_test $IMAGE 2>&1 |
  tee "$OUT/e2e_rgpu.log" | tail -4
[ "${PIPESTATUS[0]}" = 0 ] || status=1
LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$port RGPU_BATCH=0 build/bin/driver_api_test $IMAGE \
  >"$OUT/e2e_rgpu_nobatch.log" 2>&1 && echo "RGPU_BATCH=0: passed" || { echo "RGPU_BATCH=0: FAILED"; status=1; }

step "large_params_test (8 KiB kernel parameters) directly and through rgpu"
LD_LIBRARY_PATH=$REAL_DIR build/bin/large_params_test $IMAGE 2>&1 | tail -2
[ "${PIPESTATUS[0]}" = 0 ] || status=1
LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$port build/bin/large_params_test $IMAGE 2>&1 | tail -2
[ "${PIPESTATUS[0]}" = 0 ] || status=1

step "demo program through rgpu"
LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$port build/bin/vector_add $IMAGE || status=1
echo "server log (proof the calls were served remotely):"
cat "$OUT/server.log"
kill $server 2>/dev/null
wait $server 2>/dev/null
fi

if [ "${RGPU_GPU_CTEST:-0}" = 1 ]; then
  step "unit and fake-driver tests"
  (cd build && ctest -j"$nproc_" -E codegen --output-on-failure >"$OUT/ctest.log" 2>&1) && echo "ctest passed" ||
    { tail -30 "$OUT/ctest.log"; status=1; }
fi

port=19715
build/bin/rgpu-server --listen 127.0.0.1:$port --driver "$REAL" >"$OUT/server_runtime.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
sleep 0.5
if want runtime; then
step "runtime needs and the other e2e programs: real driver (must pass), then through rgpu"
# Each program runs directly on the real driver first: what it checks holds there too, or the
# program (or the fake it was written against) is wrong.
pair() {  # pair NAME ARGS...: the program on the real driver, then through rgpu
  local prog=$1; shift
  LD_LIBRARY_PATH=$REAL_DIR build/bin/$prog "$@" >"$OUT/${prog}_local.log" 2>&1; local l=$?
  LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$port build/bin/$prog "$@" >"$OUT/${prog}_rgpu.log" 2>&1; local r=$?
  echo "$prog: local rc $l, rgpu rc $r: $(tail -1 "$OUT/${prog}_rgpu.log")"
  [ $l = 0 ] || { echo "  $prog FAILED on the real driver: $(tail -3 "$OUT/${prog}_local.log")"; status=1; }
  [ $r = 0 ] || status=1
}
pair runtime_needs_test $IMAGE
for prog in memcpy2d_test extras_test exit_teardown_test printf_test managed_test; do pair $prog $IMAGE; done
pair graph_test $IMAGE build/tests/kernels/test_kernels.ptx
pair mapped_traffic_test
# CUBLASLT_1734DC26 slot 4: the real driver's GPC of each TPC, and the same through rgpu (the token
# is the shim's own there, so only the GPCs are compared).
pair cluster_topology_test
grep -h "cluster_topology_test: token" "$OUT/cluster_topology_test_local.log" "$OUT/cluster_topology_test_rgpu.log"
[ "$(grep -o 'TPCs in.*' "$OUT/cluster_topology_test_local.log")" = "$(grep -o 'TPCs in.*' "$OUT/cluster_topology_test_rgpu.log")" ] ||
  { echo "  cluster_topology_test: rgpu's GPCs differ from the real driver's"; status=1; }
fi

if want conformance; then
  step "conformance: the same calls on the real driver, the fake and through rgpu (tests/conformance)"
  # Writes real.txt, fake.txt, rgpu_real.txt and the diffs to $RESULTS/conformance; fails when
  # the fake differs from the real driver beyond tests/conformance/known_fake.txt, or rgpu from the
  # real driver beyond tests/conformance/known_rgpu.txt.
  python3 tests/conformance/run.py real --build build --image $IMAGE --out "$RESULTS/conformance" \
    --cuda "$REAL" --nvml "${RGPU_REAL_NVML:-$REAL_DIR/libnvidia-ml.so.1}" >"$OUT/conformance.log" 2>&1
  rc=$?
  head -80 "$OUT/conformance.log"
  [ $rc = 0 ] || status=1
fi

if want corpus; then
  step "tests/cuda corpus: real driver, then through rgpu (tests/gpu/corpus.sh)"
  OUT="$OUT" RGPU_REAL_DRIVER="$REAL" tests/gpu/corpus.sh build ${RGPU_GPU_CORPUS:-} | tee "$OUT/corpus.txt" | grep -v '^PASS'
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if want torch; then
  step "PyTorch ladder (tests/gpu/torch_ladder.py): local GPU, then through rgpu"
  PY=${RGPU_TORCH_PYTHON:-python3}
  SITE=$($PY -c "import os,torch;print(os.path.dirname(torch.__file__))" 2>/dev/null)
  "$PY" tests/gpu/torch_ladder.py --out "$OUT/torch_local.json" 2>&1 | tee "$OUT/torch_local.log" | grep -E "PASS|FAIL|ladder"
  LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$port TRITON_LIBCUDA_PATH=$PWD/build/lib \
    RGPU_STATS="$OUT/torch_rgpu_stats.json" "$PY" tests/gpu/torch_ladder.py --out "$OUT/torch_rgpu.json" 2>&1 |
    tee "$OUT/torch_rgpu.log" | grep -E "PASS|FAIL|ladder"
  # A second local run of the GPT rung measures how much two local runs of the same seed differ
  # (bf16 and the attention backward are not bit-reproducible); rgpu is held to that band.
  "$PY" tests/gpu/torch_ladder.py --only gpt_training --out "$OUT/torch_local2.json" >/dev/null 2>&1
  "$PY" tests/gpu/torch_ladder.py --compare "$OUT/torch_local.json" "$OUT/torch_rgpu.json" \
    --local-again "$OUT/torch_local2.json" || status=1
fi
kill $server 2>/dev/null
wait $server 2>/dev/null

if want torchdev; then
  step "PyTorch device rgpu against rgpu-opserver --device cuda (tests/python)"
  if [ -x build/bin/rgpu-opserver ]; then
    # Every test_device_*.py, as ctest torch_device runs them on the cpu.
    RGPU_TEST_OPSERVER_DEVICE=cuda RGPU_BUILD_DIR=$PWD/build python3 -m pytest -q -p no:cacheprovider \
      tests/python/test_device_*.py \
      2>&1 | tee "$OUT/torchdev.log" | tail -5
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  else
    echo "rgpu-opserver was not built (no torch found by CMake): skipped"
  fi
fi

if want torchstep; then
  step "PyTorch device rgpu: training step against local cuda, eager and compiled (bench/train_bench.py)"
  if [ -x build/bin/rgpu-opserver ]; then
    # The 6-layer model, fp32: local cuda against the rgpu device (opserver on this GPU), the same
    # program on both (fused AdamW, the local run's default).
    build/bin/rgpu-opserver --device cuda --listen 127.0.0.1:19720 >"$OUT/opserver.log" 2>&1 &
    opserver=$!
    sleep 2
    python3 bench/train_bench.py --model small --steps 15 --fp32 --out "$OUT/torchdev_local.json" | tail -1
    RGPU_OPSERVER=127.0.0.1:19720 RGPU_BUILD_DIR=$PWD/build PYTHONPATH=$PWD/python python3 bench/train_bench.py --model small --steps 15 \
      --device rgpu --fused on --out "$OUT/torchdev_rgpu.json" 2>&1 | tail -1
    # The same model under torch.compile(backend="rgpu") (each captured graph one remote call),
    # and local cuda under inductor for reference.
    RGPU_OPSERVER=127.0.0.1:19720 RGPU_BUILD_DIR=$PWD/build PYTHONPATH=$PWD/python python3 bench/train_bench.py --model small --steps 15 \
      --device rgpu --fused on --compile rgpu --out "$OUT/torchdev_rgpu_compiled.json" 2>&1 | tail -1
    python3 bench/train_bench.py --model small --steps 15 --fp32 --compile inductor --out "$OUT/torchdev_local_compiled.json" 2>&1 | tail -1
    kill $opserver 2>/dev/null
    python3 -c "import json,sys; l,r,c=(json.load(open(sys.argv[i])) for i in (1,2,3)); print(f'rgpu device / local cuda step time: {r[\"step_ms_median\"]/l[\"step_ms_median\"]:.2f} ({r[\"step_ms_median\"]:.1f} vs {l[\"step_ms_median\"]:.1f} ms); compiled rgpu / eager rgpu: {c[\"step_ms_median\"]/r[\"step_ms_median\"]:.2f} ({c[\"step_ms_median\"]:.1f} ms)')" \
      "$OUT/torchdev_local.json" "$OUT/torchdev_rgpu.json" "$OUT/torchdev_rgpu_compiled.json" || true
  else
    echo "rgpu-opserver was not built (no torch found by CMake): skipped"
  fi
fi

if want samples && [ -x .samples/run.sh ]; then
  step "NVIDIA cuda-samples through rgpu (built and carried separately; see the closing note)"
  build/bin/rgpu-server --listen 127.0.0.1:19713 --driver "$REAL" >"$OUT/server_samples.log" 2>&1 &
  server=$!
  sleep 0.5
  SAMPLE_TIMEOUT=${SAMPLE_TIMEOUT:-30} timeout "${SAMPLES_BUDGET:-300}" .samples/run.sh rgpu "$OUT/samples_rgpu.tsv" ${RGPU_GPU_SAMPLES:-} >"$OUT/samples_run.log" 2>&1
  echo "samples: $(grep -c "	pass	" "$OUT/samples_rgpu.tsv") pass, $(grep -vc "	pass	" "$OUT/samples_rgpu.tsv") not, of $(wc -l <"$OUT/samples_rgpu.tsv") run"
  grep -v "	pass	" "$OUT/samples_rgpu.tsv" | cut -c1-200
  if [ -n "${RGPU_GPU_TRACE_SAMPLES:-}" ]; then
    RGPU_TRACE=2 SAMPLE_TIMEOUT=${SAMPLE_TIMEOUT:-30} .samples/run.sh rgpu "$OUT/samples_trace.tsv" "$RGPU_GPU_TRACE_SAMPLES" >/dev/null 2>&1
    for f in "$OUT"/samples_trace.tsv.logs/*.log; do
      echo "--- $(basename "$f"): failed calls"; grep -e "->" "$f" | sort | uniq -c | sort -rn | head -8
    done
  fi
  kill $server 2>/dev/null
  wait $server 2>/dev/null
fi

if want nvml; then
step "nvidia-smi through rgpu's NVML shim (libnvidia-ml.so.1 -> rgpu-server -> real NVML)"
REAL_NVML=${RGPU_REAL_NVML:-$REAL_DIR/libnvidia-ml.so.1}
nport=19714
build/bin/rgpu-server --listen 127.0.0.1:$nport --driver "$REAL" --nvml "$REAL_NVML" >"$OUT/server_nvml.log" 2>&1 &
nserver=$!
sleep 0.5
LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$nport nvidia-smi >"$OUT/nvidia_smi_rgpu.log" 2>&1
smi_rc=$?
cat "$OUT/nvidia_smi_rgpu.log"
if [ $smi_rc = 0 ] && grep -q "H200" "$OUT/nvidia_smi_rgpu.log" && grep -Eq "/ *14[0-9]{4}MiB" "$OUT/nvidia_smi_rgpu.log" &&
  grep -q "prog=nvidia-smi" "$OUT/server_nvml.log"; then
  echo "nvidia-smi through rgpu: passed"
else
  echo "nvidia-smi through rgpu: FAILED (rc $smi_rc; see $OUT/nvidia_smi_rgpu.log, $OUT/server_nvml.log)"
  status=1
fi
LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$nport build/bin/nvml_test 2>&1 | tee "$OUT/nvml_test_rgpu.log" | tail -3
[ "${PIPESTATUS[0]}" = 0 ] || status=1
RGPU_SERVER=127.0.0.1:$nport build/bin/rgpu-smi || status=1
echo "server log:"
cat "$OUT/server_nvml.log"
kill $nserver 2>/dev/null
wait $nserver 2>/dev/null
fi

if want suspend; then
  step "rgpu-smi suspend / resume / migrate on the real driver, and the checkpoint API probe (tests/gpu/suspend.sh)"
  tests/gpu/suspend.sh "$OUT" "$REAL" 2>&1 | tee "$OUT/suspend.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if want tls; then
  step "over TLS 1.3: the driver-API program, and PyTorch CUDA training against plain TCP (tests/gpu/tls.sh)"
  tests/gpu/tls.sh "$OUT" "$REAL" "${RGPU_TORCH_PYTHON:-python3}" 2>&1 | tee "$OUT/tls.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  step "rgpu's TLS records against OpenSSL's on this host (protocol/tls_records_test; Nettle: $(grep -q RGPU_HAVE_NETTLE build/build.ninja && echo used || echo not found))"
  build/bin/tls_records_test 2>&1 | tee "$OUT/tls_records_test.log" | tail -2
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  step "driver path over TLS 1.3 against plain TCP, A B A B (bench/pair_driver_bench.sh --tls-new)"
  bench/pair_driver_bench.sh build build "$RESULTS/tlsbench" --driver "$REAL" --pairs "${RGPU_AB_PAIRS:-3}" $QUICK --tls-new ||
    status=1
  step "the small synchronous call over TLS 1.3 and plain TCP in one program, alternating rounds (pair_driver_bench.sh --same-process)"
  bench/pair_driver_bench.sh build build "$RESULTS/tlsbench_same" --driver "$REAL" --pairs "${RGPU_SAME_PAIRS:-9}" --tls-new \
    --same-process 21 || status=1
  step "the channel over TLS 1.3 against plain TCP, without a GPU: round trip and 1 MiB bulk (bench/channel_bench.cpp), and this host's AEAD speed"
  { lscpu | grep -E 'Model name|^CPU\(s\)'; for c in aes-128-gcm chacha20-poly1305; do openssl speed -seconds 1 -bytes 16384 -evp $c 2>/dev/null | tail -1; done; } |
    tee "$OUT/tls_host.log"
  if [ -x build/bin/channel_bench ]; then
    build/bin/channel_bench --benchmark_filter='RoundTripChannel|BulkChannel' --benchmark_out="$RESULTS/channel_tls.json" \
      --benchmark_out_format=json 2>&1 | grep -E '_median|_mean' | tee -a "$OUT/tls_host.log"
  fi
fi

if want multiserver; then
  step "two rgpu-servers on this GPU under one program (tests/gpu/multi_server.sh, issue 19)"
  tests/gpu/multi_server.sh "$OUT" "$REAL" "${RGPU_TORCH_PYTHON:-python3}" 2>&1 | tee "$OUT/multi_server.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if want nccl; then
  step "NCCL through rgpu: nccl_test and the all-reduce sweep, locally and through rgpu (tests/gpu/nccl.sh, issue 19)"
  tests/gpu/nccl.sh "$RESULTS" "$REAL" "${RGPU_TORCH_PYTHON:-python3}" 2>&1 | tee "$OUT/nccl.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  step "NCCL in the client over the driver shim against forwarded, PyTorch, one rank (tests/gpu/nccl_client_side.sh)"
  tests/gpu/nccl_client_side.sh "$RESULTS" "$REAL" "${RGPU_TORCH_PYTHON:-python3}" 2>&1 | tee "$OUT/nccl_client_side.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if want multigpu; then
  step "many GPUs: DDP of GPT-2 small on 2 GPUs against local, and a 1 GiB copy between two servers against raw TCP (tests/gpu/multigpu.sh, issue 19)"
  tests/gpu/multigpu.sh "$RESULTS" "$REAL" "${RGPU_TORCH_PYTHON:-python3}" 2>&1 | tee "$OUT/multigpu.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if want package; then
  step "the packaged rgpu (the wheel, tests/gpu/package.sh): rgpu-server, the shim, driver_api_test, the PyTorch ladder, rgpu-doctor"
  tests/gpu/package.sh "$OUT" "$REAL" "${RGPU_TORCH_PYTHON:-python3}" 2>&1 | tee "$OUT/package.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if want reconnect; then
  step "PyTorch CUDA training through rgpu: 10 cuts, and rgpu-server restarted mid-training (tests/gpu/reconnect.sh)"
  tests/gpu/reconnect.sh "$OUT" "$REAL" "${RGPU_TORCH_PYTHON:-python3}" 2>&1 | tee "$OUT/reconnect.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

if want bench && [ "${RGPU_GPU_BENCH:-1}" = 1 ]; then
  step "driver-path benchmark"
  bench/run_driver_bench.sh $QUICK --driver "$REAL" --out "$OUT" >"$OUT/bench.log" 2>&1 || status=1
  cat "$OUT/driver_bench.md" 2>/dev/null || tail -30 "$OUT/bench.log"
  cp "$OUT/driver_bench.md" "$OUT/driver_bench.json" "$RESULTS/" 2>/dev/null
fi
if want abbench && [ -n "${RGPU_GPU_BASE_TREE:-}" ]; then
  step "driver path against the commit in $RGPU_GPU_BASE_TREE, A B A B (bench/pair_driver_bench.sh)"
  # The load average beside how many threads sit in uninterruptible sleep: common/spin_policy.h
  # once judged spare CPUs by the load average, which such threads (a GPU driver's) raise.
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); threads in D state: $(ps -eLo stat= | grep -c '^D')"
  base=$RGPU_GPU_BASE_TREE
  { cmake -S "$base" -B "$base/build-base" -G Ninja -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$base/build-base" -j"$nproc_" --target rgpu-server driver_bench rgpu_cuda; } >"$OUT/build_base.log" 2>&1 ||
    { tail -20 "$OUT/build_base.log"; status=1; }
  # Busy CPUs over one second, from /proc/stat, as the spin policy judges them now.
  read -r _ u n s i w q sq st _ </proc/stat; sleep 1; read -r _ u2 n2 s2 i2 w2 q2 sq2 st2 _ </proc/stat
  echo "busy CPUs over 1 s: $(( ((u2+n2+s2+q2+sq2+st2)-(u+n+s+q+sq+st)) * $(nproc) / ((u2+n2+s2+i2+w2+q2+sq2+st2)-(u+n+s+i+w+q+sq+st)) )) of $(nproc)"
  bench/pair_driver_bench.sh "$base/build-base" build "$RESULTS/abbench" --driver "$REAL" --pairs "${RGPU_AB_PAIRS:-3}" $QUICK ||
    status=1
  # RGPU_AB_SPIN=1: again with RGPU_SPIN=1 (the new build's waits always spin first, as the base's
  # did), which tells the spin policy's choice apart from the rest of the new build's cost.
  if [ "${RGPU_AB_SPIN:-0}" = 1 ]; then
    step "the same with RGPU_SPIN=1"
    RGPU_SPIN=1 bench/pair_driver_bench.sh "$base/build-base" build "$RESULTS/abbench-spin" --driver "$REAL" \
      --pairs "${RGPU_AB_PAIRS:-3}" $QUICK || status=1
  fi
fi
if want startup; then
  SMODEL=${RGPU_STARTUP_MODEL:-small}
  step "start-up through rgpu, warm ($SMODEL model, 3 steps): the calls that waited, the loads that waited and why, the client's own time"
  PY=${RGPU_TORCH_PYTHON:-python3}
  port=19716
  build/bin/rgpu-server --listen 127.0.0.1:$port --driver "$REAL" --cache-dir "$OUT/startup-cache" >"$OUT/server_startup.log" 2>&1 &
  sserver=$!
  sleep 0.5
  for run in cold warm; do
    LD_LIBRARY_PATH=$PWD/build/lib RGPU_SERVER=127.0.0.1:$port RGPU_LOG=debug RGPU_ANSWER_CACHE="$OUT/startup-answers.txt" RGPU_NVRTC_CACHE="$OUT/startup-nvrtc" \
      RGPU_STATS="$OUT/startup_$run.stats.json" "$PY" bench/train_bench.py --model "$SMODEL" --steps 3 --warmup 1 \
      --out "$OUT/startup_$run.json" >"$OUT/startup_$run.log" 2>&1 || { echo "startup $run: FAILED"; status=1; }
  done
  kill $sserver 2>/dev/null
  grep -o "image's load waits (.*)" "$OUT/startup_warm.log" | sort | uniq -c
  for run in cold warm; do
    echo "$run: NVRTC cache $(grep -c 'nvrtc cache: hit' "$OUT/startup_$run.log") hits, $(grep -c 'nvrtc cache: miss' "$OUT/startup_$run.log") misses"
  done
  grep -E "warm:|ended after" "$OUT/server_startup.log" | grep -v "ended after [0-9] calls" | tail -4
  "$PY" -c 'import json,sys; s=json.load(open(sys.argv[1])); print("round trips", s["round_trips"], "client time (us):", s.get("time_us")); [print("  waited", o["waited"], o["op"], o["total_wait_us"] // 1000, "ms") for o in s["ops"] if o["waited"]]' \
    "$OUT/startup_warm.stats.json"
  "$PY" -c 'import json,sys; [print(r, "marks (s):", {k: round(v, 2) for k, v in json.load(open(sys.argv[1].replace("RUN", r)))["first_step_marks_s"].items()}) for r in ("cold", "warm")]' \
    "$OUT/startup_RUN.json"
fi

if want train; then
  step "training-step benchmark (bench/run_train_bench.sh): local GPU vs rgpu at 0, 1 and 30 ms added"
  bench/run_train_bench.sh --driver "$REAL" --out "$OUT" --delays "${RGPU_TRAIN_DELAYS:-0 1 30}" \
    --models "${RGPU_TRAIN_MODELS:-small gpt2}" --pairs "${RGPU_TRAIN_PAIRS:-3}" 2>&1 | tee "$OUT/train_bench.log" | tail -20
  cp "$OUT/train_bench.md" "$OUT/train_bench.json" "$RESULTS/" 2>/dev/null
fi
tar czf "$RESULTS/gpu-logs.tgz" --exclude=module-cache -C "$RESULTS" logs

echo
[ $status = 0 ] && echo "GPU RUN: ALL PASSED" || echo "GPU RUN: FAILURES (see $OUT)"
exit $status
