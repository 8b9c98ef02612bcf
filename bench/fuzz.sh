#!/usr/bin/env bash
# Builds every fuzz target with clang and libFuzzer (-DRGPU_FUZZ=ON, in its own build directory),
# runs each in turn for a number of executions on the corpus kept in the repository
# (tests/fuzz/corpus/<target>/) plus the target's built-in seeds, and writes what ran to JSON:
# executions, exec/s, seconds, new corpus units and crashes per target, with the machine and the
# commit. Targets run one at a time, each as --jobs libFuzzer processes (one core each), niced.
#
#   bench/fuzz.sh [--runs N] [--max-seconds S] [--jobs N] [--out FILE] [--append] [--install]
#                 [--install-only] [--no-build] [TARGET...]
#
# --runs N         executions per target, all its workers together (default 10000: a smoke)
# --max-seconds S  also stop a target after S seconds (libFuzzer -max_total_time; default none)
# --jobs N         N libFuzzer workers per target at once (default 1), each a process of its own
#                  on the target's one corpus directory: each runs N/jobs executions (-runs), writes
#                  what it finds there and takes up the others' finds (libFuzzer -reload). The JSON
#                  sums their executions and keeps each worker's count and log. On a machine of
#                  16 cores, --jobs 14 runs the campaign 14 times as fast.
# --out FILE       the JSON (default bench/results/fuzz.json); rewritten after every target, so a
#                  run cut short keeps what finished
# --append         keep the targets FILE already has (those run again are replaced): a long run
#                  done a few targets at a time
# --install        install clang and the libFuzzer runtime with apt when they are missing;
#                  without it a missing one is an error. The runtime's package is the first of
#                  libclang-rt-V-dev (Debian 12, Ubuntu 24.04), libclang-common-V-dev (Ubuntu 22.04,
#                  where it holds libFuzzer) that apt knows, V the compiler's major version
# --install-only   install them (as --install) and stop (scripts/setup.sh with RGPU_SETUP_FUZZ=1)
# --no-build       run what build-fuzz/ holds
# TARGET...        only these (default: all of them; the list is TARGETS below)
# Environment: RGPU_FUZZ_COMMIT (the commit the JSON names, where the tree has no git), RGPU_FUZZ_CLANG (the C++ compiler: default clang++, else the newest clang++-V on
# PATH; e.g. clang++-16), RGPU_FUZZ_BUILD (default build-fuzz), RGPU_TORCH_PYTHON (a python with torch: also
# builds and runs opserver's torch_wire_fuzz), JOBS (ninja -j, default 2), RGPU_FUZZ_NICE (the
# targets' niceness, default 5: beside builds run at nice 5, a fair share; the build runs at 5).
# Each worker is one process on one core; on a shared machine run one target at a time, --jobs 1.
#
# A crash stops its worker: libFuzzer writes the input to build-fuzz/fuzz-artifacts/<target>/
# and the JSON names it (a target's other workers go on); replay it with build-fuzz/bin/<target> FILE. New corpus units stay in
# build-fuzz/fuzz-corpus/<target>/ (the repository's corpus is only read); a crash's fix keeps its
# input in tests/fuzz/corpus/<target>/ as a regression seed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=10000
max_seconds=0
out=bench/results/fuzz.json
install=0
install_only=0
jobs=1
append=0
build=1
only=()
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --max-seconds) max_seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --append) append=1; shift ;;
    --install) install=1; shift ;;
    --install-only) install=1; install_only=1; shift ;;
    --no-build) build=0; shift ;;
    -h | --help) sed -n '2,38p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (--help lists them)" >&2; exit 2 ;;
    *) only+=("$1"); shift ;;
  esac
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --jobs takes a number of workers (1 or more), not '$jobs'" >&2; exit 2; }
build_dir=${RGPU_FUZZ_BUILD:-build-fuzz}

# Each target and the decoders it feeds (tests/fuzz/CMakeLists.txt says more).
declare -A DECODER=(
  [snapshot_fuzz]="protocol/snapshot.h decode_snapshot (the device snapshot the client reads)"
  [handshake_fuzz]="protocol/handshake.h, both sides (hello, challenge, proof, the server's answer)"
  [channel_fuzz]="protocol/channel.h: ChannelOpen, ResumeHello, ResumeChallenge, ResumeProof; both sides' receive path (channel frames); the server's and the client's resume exchange (kOpResume, proofs); protocol/drain.h Notice"
  [wire_graph_fuzz]="protocol/wire/graph.h, capture.h"
  [wire_launch_fuzz]="protocol/wire/launch.h"
  [wire_copy_fuzz]="protocol/wire/copy.h"
  [wire_module_fuzz]="protocol/wire/module.h, link.h"
  [wire_mapped_fuzz]="protocol/wire/mapped.h (mapped and managed memory messages, both directions)"
  [wire_occupancy_fuzz]="protocol/wire/occupancy.h"
  [wire_control_fuzz]="protocol/wire/control.h (alloc ahead, callbacks, sessions, session control), dark_api.h"
  [wire_nccl_fuzz]="protocol/wire/nccl.h (the NCCL API forwarded by rgpu's libnccl.so.2)"
  [wire_rest_fuzz]="protocol/wire/stream.h, memory.h, texture.h, tensor_map.h, pointer attributes"
  [torch_wire_codec_fuzz]="protocol/torch_wire.h get_desc, get_shape, get_status (torch-free)"
  [dispatch_fuzz]="server/dispatch.h: every handler the server accepts, on the fake driver and fake NVML"
  [nvml_fuzz]="the server's NVML handlers alone (server/nvml, gen/nvml_server_dispatch.gen.cpp)"
  [mapped_fuzz]="server/mapped_memory.cpp: kOpMapped*, kOpManagedAlloc, with the copies and syncs that drive its updates"
  [client_frames_fuzz]="client/connection.cpp: every frame the CUDA shim reads from its server (callbacks, async data, printf output, mapped updates, notices, the reply and its sink), then the reply as the shim reads it"
  [tls_opening_fuzz]="protocol/tls.h: a TLS listener's clear preamble (read_tls_opening) and TLS handshake (tls_accept), a TLS client's first read (a clear refusal, or the server's first flight)"
  [tls_records_fuzz]="protocol/tls_records.h Opener: the TLS 1.3 records a tls:// connection reads after the handshake (headers, lengths, forgeries; authentic KeyUpdates, alerts, padding, handshake messages)"
  [http_request_fuzz]="common/http_server.h parse_request (the metrics endpoint's requests, --metrics-listen)"
  [cuda_image_fuzz]="common/cuda_image.h (cubin, fatbin, compressed fatbin, PTX images clients load)"
  [torch_wire_fuzz]="opserver/session.h: whole rgpu-opserver frames (protocol/torch_wire.h ops, values, storage changes); needs torch"
)
# libFuzzer options of a target's own. The dispatch targets run the fake driver in-process (its
# threads, its memory): LeakSanitizer's scan of it crashed its own tracer here ("Tracer caught
# signal 11", an empty input written as the crash), so they run without the leak check.
# client_frames_fuzz's connection logs the error of each session it loses, one line an input:
# its stderr is closed (libFuzzer still prints its own lines and the sanitizers' reports).
declare -A EXTRA=(
  [dispatch_fuzz]="-detect_leaks=0"
  [nvml_fuzz]="-detect_leaks=0"
  [mapped_fuzz]="-detect_leaks=0"
  [client_frames_fuzz]="-close_fd_mask=3"
)
TARGETS=(snapshot_fuzz handshake_fuzz channel_fuzz wire_graph_fuzz wire_launch_fuzz wire_copy_fuzz wire_module_fuzz
  wire_mapped_fuzz wire_occupancy_fuzz wire_control_fuzz wire_nccl_fuzz wire_rest_fuzz torch_wire_codec_fuzz dispatch_fuzz
  nvml_fuzz mapped_fuzz cuda_image_fuzz http_request_fuzz client_frames_fuzz tls_opening_fuzz tls_records_fuzz)
[ -n "${RGPU_TORCH_PYTHON:-}" ] && TARGETS+=(torch_wire_fuzz)
((${#only[@]})) && TARGETS=("${only[@]}")
for t in "${TARGETS[@]}"; do
  [ -n "${DECODER[$t]:-}" ] || { echo "fuzz.sh: no target $t (the list: ${!DECODER[*]})" >&2; exit 2; }
done

# clang with the libFuzzer runtime. The compiler: RGPU_FUZZ_CLANG, else clang++, else the newest
# clang++-V on PATH (a host with only clang-16, say).
cxx=${RGPU_FUZZ_CLANG:-}
if [ -z "$cxx" ]; then
  cxx=clang++
  if ! command -v clang++ >/dev/null; then
    newest=$(compgen -c clang++- | grep -E '^clang\+\+-[0-9]+$' | sort -t- -k2 -n | tail -1)
    [ -n "$newest" ] && cxx=$newest
  fi
fi
cc=${cxx/clang++/clang}
have_libfuzzer() {
  command -v "$cxx" >/dev/null || return 1
  local tmp rc
  tmp=$(mktemp -d)
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$tmp/t.cpp"
  "$cxx" -fsanitize=fuzzer,address,undefined "$tmp/t.cpp" -o "$tmp/t" >/dev/null 2>&1
  rc=$?
  rm -rf "$tmp"
  return $rc
}
# The first of the named packages that apt knows ("" when none).
first_known_package() {
  local p
  for p in "$@"; do
    apt-cache show "$p" >/dev/null 2>&1 && { echo "$p"; return; }
  done
}
# Only a build needs the runtime: a target built elsewhere carries libFuzzer in its binary (--no-build
# runs build-fuzz/ brought from another machine, e.g. the GPU host, whose clang has no runtime).
if ((build)) && ! have_libfuzzer; then
  if ((install)); then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    apt_install() {
      echo "fuzz.sh: installing $*"
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    }
    $SUDO apt-get update -qq
    # The compiler's package: clang for clang++, clang-V for clang++-V.
    if ! command -v "$cxx" >/dev/null; then
      case $cxx in
        clang++) apt_install clang ;;
        clang++-[0-9]*) apt_install "clang-${cxx#clang++-}" ;;
        *) echo "fuzz.sh: $cxx is missing, and RGPU_FUZZ_CLANG names no package to install it from" >&2; exit 1 ;;
      esac
    fi
    # The runtime's: libFuzzer and the sanitizers' libraries of that compiler's version. Debian 12
    # and Ubuntu 24.04 ship them as libclang-rt-V-dev; Ubuntu 22.04 (clang 14 and older) inside
    # libclang-common-V-dev, which clang-V already pulls in.
    version=$("$cxx" -dumpversion | cut -d. -f1)
    runtime=$(first_known_package "libclang-rt-$version-dev" "libclang-common-$version-dev")
    if [ -z "$runtime" ]; then
      echo "fuzz.sh: apt knows neither libclang-rt-$version-dev nor libclang-common-$version-dev, the libFuzzer runtime of $cxx (clang $version)" >&2
      exit 1
    fi
    dpkg -s "$runtime" >/dev/null 2>&1 || apt_install "$runtime"
    have_libfuzzer || { echo "fuzz.sh: $cxx -fsanitize=fuzzer still does not link after installing $runtime" >&2; exit 1; }
  else
    echo "fuzz.sh: $cxx with the libFuzzer runtime is missing: run with --install (or apt-get install clang libclang-rt-dev; on Ubuntu 22.04 clang alone)" >&2
    exit 1
  fi
fi
if ((install_only)); then
  echo "fuzz.sh: $cxx ($("$cxx" -dumpversion)) links -fsanitize=fuzzer"
  exit 0
fi

if ((build)); then
  torch=()
  [ -n "${RGPU_TORCH_PYTHON:-}" ] && torch=(-DRGPU_TORCH_PYTHON="$RGPU_TORCH_PYTHON")
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_CXX_COMPILER="$cxx" -DRGPU_FUZZ=ON "${torch[@]}" >/dev/null
  ninja_targets=()
  for t in "${TARGETS[@]}"; do
    ninja_targets+=("$t")
    [ "$t" = cuda_image_fuzz ] || ninja_targets+=("${t}_standalone")  # it writes the built-in seeds
  done
  [[ " ${TARGETS[*]} " == *" cuda_image_fuzz "* ]] && ninja_targets+=(rgpu_test_kernels)
  nice -n 5 ninja -C "$build_dir" -j"${JOBS:-2}" "${ninja_targets[@]}"
fi

mkdir -p "$(dirname "$out")"
results=$(mktemp)
trap 'rm -f "$results"' EXIT
if ((append)) && [ -f "$out" ]; then
  python3 - "$out" "$results" "${TARGETS[@]}" <<'EOF'
import json, sys
out, results, again = sys.argv[1], sys.argv[2], set(sys.argv[3:])
with open(results, "w") as f:
    for t in json.load(open(out))["targets"]:
        if t["target"] not in again:
            f.write(json.dumps(t) + "\n")
EOF
fi
# The commit the targets ran at: RGPU_FUZZ_COMMIT names it where the tree has no git (a copy on
# another machine running --no-build with binaries built here).
commit=${RGPU_FUZZ_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- . 2>/dev/null || echo "+dirty")}

for t in "${TARGETS[@]}"; do
  bin=$build_dir/bin/$t
  [ -x "$bin" ] || { echo "fuzz.sh: $bin is not built" >&2; exit 1; }
  corpus=$build_dir/fuzz-corpus/$t
  artifacts=$build_dir/fuzz-artifacts/$t/
  mkdir -p "$corpus" "$artifacts"
  [ -d "tests/fuzz/corpus/$t" ] && cp -n tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  if [ "$t" = cuda_image_fuzz ]; then
    cp -n "$build_dir"/tests/kernels/*.cubin "$build_dir"/tests/kernels/*.fatbin "$build_dir"/tests/kernels/*.ptx "$corpus"/ 2>/dev/null || true
  elif [ -x "$build_dir/bin/${t}_standalone" ]; then
    seeds=$build_dir/fuzz-seeds/$t
    rm -rf "$seeds" && mkdir -p "$seeds"
    "$build_dir/bin/${t}_standalone" --write-seeds "$seeds" >/dev/null 2>&1 && cp -n "$seeds"/* "$corpus"/ 2>/dev/null || true
  fi
  before=$(ls "$corpus" | wc -l)
  crashes_before=$(ls "$artifacts" | wc -l)
  mkdir -p "$build_dir/fuzz-logs"
  # Each worker's share of the runs (the last ones may do one fewer), its log (one worker: <t>.log).
  per_worker=$(((runs + jobs - 1) / jobs))
  args=(-print_final_stats=1 -timeout=20 -rss_limit_mb=4096 -artifact_prefix="$artifacts" -close_fd_mask=1)
  ((max_seconds > 0)) && args+=(-max_total_time="$max_seconds")
  # shellcheck disable=SC2206
  [ -n "${EXTRA[$t]:-}" ] && args+=(${EXTRA[$t]})
  echo "fuzz.sh: $t: $runs runs$( ((max_seconds > 0)) && echo " or $max_seconds s")$( ((jobs > 1)) && echo " by $jobs workers") on $before inputs"
  start=$(date +%s.%N)
  logs=()
  pids=()
  for ((w = 0; w < jobs; ++w)); do
    share=$((runs / jobs + (w < runs % jobs ? 1 : 0)))
    if ((jobs == 1)); then log=$build_dir/fuzz-logs/$t.log; else log=$build_dir/fuzz-logs/$t.$w.log; fi
    logs+=("$log")
    nice -n $((${RGPU_FUZZ_NICE:-5} - $(nice))) "$bin" "${args[@]}" -runs="$share" "$corpus" >"$log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for pid in "${pids[@]}"; do
    set +e
    wait "$pid"
    r=$?
    set -e
    ((rc != 0)) || rc=$r
  done
  end=$(date +%s.%N)
  # Per worker: executions, libFuzzer's average exec/s, peak RSS (0 for a worker that wrote no stats).
  execs=() eps=() rss=()
  for log in "${logs[@]}"; do
    execs+=("$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)")
    eps+=("$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)")
    rss+=("$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)")
  done
  total=0
  for e in "${execs[@]}"; do total=$((total + ${e:-0})); done
  # What libFuzzer wrote this run: crash-, leak-, timeout-, oom- inputs are failures; a slow-unit-
  # input (over 10 s once, -report_slow_units) is only reported, as a loaded machine makes them.
  new_artifacts=$(ls -t "$artifacts" | head -n $(($(ls "$artifacts" | wc -l) - crashes_before)) | tr '\n' ' ')
  echo "fuzz.sh: $t: exit $rc, $total executions$( ((jobs > 1)) && echo " (${execs[*]})"), exec/s ${eps[*]}${new_artifacts:+, wrote: $new_artifacts}"
  if ((rc != 0)); then
    for log in "${logs[@]}"; do tail -40 "$log" | grep -v "^#" >&2 || true; done
  fi
  python3 - "$results" "$t" "${DECODER[$t]}" "$runs" "$max_seconds" "${execs[*]}" "${eps[*]}" "${rss[*]}" "$rc" \
    "$start" "$end" "$before" "$(ls "$corpus" | wc -l)" "$artifacts" "$new_artifacts" "${logs[*]}" "$commit" \
    "${RGPU_FUZZ_NICE:-5}" "$per_worker" <<'EOF'
import json, os, sys
(path, t, dec, runs, maxs, execs, eps, rss, rc, start, end, before, after, adir, arts, logs, commit, nice,
 per_worker) = sys.argv[1:]
number = lambda words: [int(w) if w.isdigit() else 0 for w in words.split(" ")]
execs, eps, rss, logs = number(execs), number(eps), number(rss), logs.split()
arts = arts.split()
slow = [a for a in arts if a.startswith("slow-unit-")]
arts = [a for a in arts if a not in slow]
seconds = float(end) - float(start)
entry = {
    "target": t, "decoders": dec, "runs_asked": int(runs), "max_seconds": int(maxs),
    # All workers' executions together; each worker's below when there are several.
    "executions": sum(execs), "seconds": round(seconds, 1),
    # libFuzzer's average (0 for a run under a second), summed over the workers, and executions
    # over the wall time including start-up and the corpus's first pass
    "exec_per_s": sum(eps), "exec_per_s_wall": round(sum(execs) / max(seconds, 1e-3)),
    "peak_rss_mb": max(rss), "exit": int(rc), "crashes": len(arts),
    "crash_inputs": [adir + a for a in arts], "slow_units": [adir + a for a in slow],
    "corpus_before": int(before), "corpus_after": int(after), "commit": commit,
    "niceness": int(nice), "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
    "workers": len(execs), "log": logs[0]}
if len(execs) > 1:
    entry.update({"runs_asked_per_worker": int(per_worker), "executions_per_worker": execs,
                  "exec_per_s_per_worker": eps, "logs": logs})
with open(path, "a") as f:
    f.write(json.dumps(entry) + "\n")
EOF
  python3 - "$results" "$out" "$commit" "$cxx" <<'EOF'
import json, os, platform, subprocess, sys, time
results, out, commit, cxx = sys.argv[1:]
targets = [json.loads(l) for l in open(results)]
def first_line(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[0]
    except Exception:
        return "?"
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
doc = {
    "what": "bench/fuzz.sh: libFuzzer (clang, ASan+UBSan) on every rgpu decoder, one target at a time "
            "(its workers at once)",
    "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "commit": commit,  # of the last run; each target has its own
    "compiler": first_line([cxx, "--version"]),
    "machine": {"cpu": model, "cores": os.cpu_count(), "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
                "kernel": platform.release()},
    "targets": targets,
    "total": {"targets": len(targets), "executions": sum(t["executions"] for t in targets),
              "crashes": sum(t["crashes"] for t in targets),
              "failed_targets": [t["target"] for t in targets if t["exit"] != 0]},
}
tmp = out + ".tmp"
with open(tmp, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
os.replace(tmp, out)
EOF
done
python3 - "$out" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{'target':24} {'executions':>12} {'exec/s':>8} {'seconds':>8} {'workers':>7} {'crashes':>7}")
for t in d["targets"]:
    print(f"{t['target']:24} {t['executions']:>12,} {t['exec_per_s']:>8,} {t['seconds']:>8} {t.get('workers', 1):>7} {t['crashes']:>7}")
EOF
echo "fuzz.sh: results in $out"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(1 if d['total']['failed_targets'] else 0)" "$out"
