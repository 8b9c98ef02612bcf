"""torch.compile on the rgpu device against eager rgpu and a local compile: bench/train_bench.py in
fresh processes, interleaved (eager rgpu, compiled rgpu, local eager, local inductor, then again),
--pairs rounds, so that a machine's drift (other jobs, heat) falls on every mode alike.

  python bench/compile_bench.py --out-dir DIR [--pairs 3] [--model tiny] [--steps 20] [--device cpu]

--device is where the opserver runs and what "local" means (cpu: rgpu-opserver --device cpu and
stock torch on this cpu; cuda: the same on the GPU). The rgpu runs use an rgpu-opserver of their
own (from $RGPU_BUILD_DIR or build/, its log in DIR/opserver.log: which graphs Inductor compiled
and how long that took); --server-arg passes it arguments (--compile none: the op-by-op baseline).
Each compiled run is a new client, so a new session that compiles its graphs again (after Inductor's
on-disk cache, seconds); the warm-up steps hold that. Writes DIR/<mode>-<pair>.json (train_bench's
output) and DIR/summary.json: per mode the median step times of its runs and their median, the
same of each run's fastest step (what other jobs on the machine took less of), and the ratios. Every process runs --threads OpenMP threads (default 1), and Inductor's
on-disk cache is DIR/inductor-cache unless TORCHINDUCTOR_CACHE_DIR is set."""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODES = {
    "rgpu_eager": ["--device", "rgpu"],
    "rgpu_compiled": ["--device", "rgpu", "--compile", "rgpu"],
    "local_eager": [],
    "local_inductor": ["--compile", "inductor"],
}


def start_opserver(device, log_path, extra_args):
    build = Path(os.environ.get("RGPU_BUILD_DIR", ROOT / "build")).resolve()
    os.environ["RGPU_BUILD_DIR"] = str(build)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(log_path, "w")
    proc = subprocess.Popen([str(build / "bin" / "rgpu-opserver"), "--device", device, "--listen", f"127.0.0.1:{port}",
                             *extra_args], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"rgpu-opserver did not start; see {log_path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--modes", default=",".join(MODES), help="a comma-separated subset of " + ", ".join(MODES))
    ap.add_argument("--fused", choices=["on", "off"], default="on",
                    help="AdamW's fused kernel in every mode (default on: the optimizer is then one op a step, "
                         "as in bench/recorded/h200-2026-12-02b, and the step is the model's graphs)")
    ap.add_argument("--server-arg", action="append", default=[], help="an argument for the rgpu-opserver this starts")
    ap.add_argument("--threads", type=int, default=1,
                    help="OMP_NUM_THREADS of every process, server and clients (default 1: on a 2-core machine the "
                         "client and the server each have a core; local runs get the same one thread)")
    a = ap.parse_args()
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    # Inductor's on-disk cache of this run alone, shared by the server's Inductor and the local one:
    # code another run generated for another thread count is not reused (its num_threads clauses
    # made a one-thread process run two threads).
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str((out / "inductor-cache").resolve()))
    modes = a.modes.split(",")
    server, addr = start_opserver(a.device, out / "opserver.log", a.server_arg)
    env = dict(os.environ, RGPU_OPSERVER=addr)
    env["PYTHONPATH"] = str(ROOT / "python") + os.pathsep + env.get("PYTHONPATH", "")
    steps = {m: [] for m in modes}
    mins = {m: [] for m in modes}  # each run's fastest step: less of what other jobs took
    try:
        for pair in range(a.pairs):
            for mode in modes:
                args = list(MODES[mode])
                if mode.startswith("local"):
                    args = ["--device", a.device, "--fp32", *args]
                path = out / f"{mode}-{pair}.json"
                t = time.time()
                r = subprocess.run([sys.executable, str(ROOT / "bench" / "train_bench.py"), "--model", a.model,
                                    "--steps", str(a.steps), "--warmup", str(a.warmup), "--fused", a.fused, *args,
                                    "--out", str(path)],
                                   env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    raise RuntimeError(f"{mode} failed:\n{r.stdout}\n{r.stderr}")
                res = json.load(open(path))
                steps[mode].append(res["step_ms_median"])
                mins[mode].append(res["step_ms_min"])
                print(f"pair {pair} {mode}: {res['step_ms_median']:.2f} ms/step (first step after "
                      f"{res['first_step_s']:.1f} s, run {time.time() - t:.0f} s), loss {res['losses'][0]:.3f} -> "
                      f"{res['losses'][-1]:.3f}", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    medians = {m: statistics.median(v) for m, v in steps.items()}
    min_medians = {m: statistics.median(v) for m, v in mins.items()}
    summary = {"model": a.model, "device": a.device, "steps": a.steps, "warmup": a.warmup, "pairs": a.pairs,
               "threads": a.threads, "fused_adamw": a.fused == "on", "server_args": a.server_arg, "step_ms": steps, "step_ms_median": medians,
               "fastest_step_ms": mins, "fastest_step_ms_median": min_medians}
    ratios, min_ratios = {}, {}
    for x, y in (("rgpu_compiled", "rgpu_eager"), ("rgpu_compiled", "local_inductor"), ("rgpu_eager", "local_eager"),
                 ("local_inductor", "local_eager")):
        if x in medians and y in medians:
            ratios[f"{x}/{y}"] = medians[x] / medians[y]
            min_ratios[f"{x}/{y}"] = min_medians[x] / min_medians[y]
    summary["ratios"] = ratios
    summary["fastest_step_ratios"] = min_ratios
    json.dump(summary, open(out / "summary.json", "w"), indent=1)
    for m, v in medians.items():
        print(f"{m}: median {v:.2f} ms/step over {len(steps[m])} runs ({', '.join(f'{s:.1f}' for s in steps[m])})")
    for k, v in ratios.items():
        print(f"{k}: {v:.3f} (of the runs' fastest steps: {min_ratios[k]:.3f})")


if __name__ == "__main__":
    main()
