#!/usr/bin/env python3
"""Time from a broken connection to a resumed session, through the driver shim (issue 16's bound:
at most 1 s plus one round trip on loopback).

Starts rgpu-server on the fake driver and rgpu-faultproxy in front of it (--on-signal), and runs a
client through the shim that calls cuMemGetInfo (a small synchronous call) back to back on a
thread of its own while the proxy breaks the connection every so often. Each break is one
sample: the longest wait between two consecutive answers around it, which is the time the client
took to notice the break, redial, prove the session and get its call answered. The round trip is
the median of the calls between breaks.

Two kinds of break, each `--cuts` times: `reset` (an RST both ways: the client's read fails at
once) and `cut` (both sides closed with FIN: its read sees the end of the stream).

    bench/resume_bench.py [--build build] [--cuts 10] [--out bench/results/resume_bench.json]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/e2e"))
from conftest import free_port, wait_for_port  # noqa: E402  (the end-to-end tests' own helpers)

# The client: calls cuMemGetInfo back to back until told to stop (stdin closes), recording the
# time each answer came; prints the times, one per line, as nanoseconds since its start.
CLIENT = r"""
import ctypes, os, sys, threading, time
cu = ctypes.CDLL(os.environ["SHIM"])
def ok(rc, what):
    if rc != 0:
        print(f"FAIL {what}: {rc}", file=sys.stderr); sys.stderr.flush(); os._exit(1)
ok(cu.cuInit(0), "cuInit")
ctx = ctypes.c_void_p()
ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "Retain")
ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
free, total = ctypes.c_size_t(), ctypes.c_size_t()
done = False
times = []
def loop():
    ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
    while not done:
        ok(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
        times.append(time.monotonic_ns())
t = threading.Thread(target=loop)
t.start()
print("ready", time.monotonic_ns(), flush=True)
sys.stdin.read()
done = True
t.join()
print("\n".join(map(str, times)))
"""


def run_kind(build, fault, cuts, spacing, runtime_dir):
    """One server, one proxy, one client; `cuts` breaks of kind `fault`. Returns the samples."""
    port, pport = free_port(), free_port()
    log = open(Path(runtime_dir) / f"server-{fault}.log", "w")
    server = subprocess.Popen([str(build / "bin/rgpu-server"), "--listen", f"127.0.0.1:{port}", "--driver", "fake",
                               "--cache-dir", "none", "--runtime-dir", runtime_dir],
                              stdout=log, stderr=subprocess.STDOUT)
    proxy = client = None
    try:
        assert wait_for_port(port), "rgpu-server did not start"
        proxy = subprocess.Popen([str(build / "bin/rgpu-faultproxy"), "--listen", f"127.0.0.1:{pport}",
                                  "--target", f"127.0.0.1:{port}", "--fault", fault, "--on-signal"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_for_port(pport), "rgpu-faultproxy did not start"
        env = dict(os.environ, LD_LIBRARY_PATH=str(build / "lib"), RGPU_SERVER=f"127.0.0.1:{pport}",
                   SHIM=str(build / "lib/libcuda.so.1"), RGPU_ANSWER_CACHE="none", RGPU_LOG="warn")
        env.pop("RGPU_TOKEN", None)
        client = subprocess.Popen([sys.executable, "-c", CLIENT], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = client.stdout.readline()
        assert first.startswith("ready"), first + client.stderr.read()
        time.sleep(spacing)
        strikes = []
        for _ in range(cuts):
            strikes.append(time.monotonic_ns())
            proxy.send_signal(signal.SIGUSR1)
            time.sleep(spacing)
        out, err = client.communicate("", timeout=60)
        assert client.returncode == 0, err
        times = [int(line) for line in out.split()]
    finally:
        for p in (client, proxy, server):
            if p and p.poll() is None:
                p.terminate()
                p.wait(10)
        log.close()
    # Per strike: the longest gap between consecutive answers from just before it to the next one.
    samples = []
    for s in strikes:
        i = next((k for k, t in enumerate(times) if t > s), None)
        assert i is not None and i > 0, "no answer came after a break: the session did not resume"
        end = s + int(spacing * 1e9 / 2)
        j = i
        while j + 1 < len(times) and times[j + 1] < end:
            j += 1
        samples.append(max(b - a for a, b in zip(times[i - 1:j], times[i:j + 1])) / 1e6)
    # The round trip: answers between breaks, away from them.
    gaps = [(b - a) / 1e3 for a, b in zip(times, times[1:])
            if all(abs(a - s) > 0.2e9 for s in strikes)]
    return samples, statistics.median(gaps), len(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--cuts", type=int, default=10)
    ap.add_argument("--spacing", type=float, default=1.5, help="seconds between breaks")
    ap.add_argument("--out", default=str(ROOT / "bench/results/resume_bench.json"))
    a = ap.parse_args()
    build = Path(a.build)
    result = {"what": "time from a broken connection to the next answer, through the shim, loopback, fake driver",
              "bound_ms": "1000 + one round trip", "cuts_per_kind": a.cuts, "kinds": {}}
    with tempfile.TemporaryDirectory(prefix="rgpu-resume-bench-") as runtime_dir:
        for fault in ("reset", "cut"):
            samples, rtt_us, calls = run_kind(build, fault, a.cuts, a.spacing, runtime_dir)
            bound = 1000 + rtt_us / 1000
            result["kinds"][fault] = {
                "resume_ms": [round(s, 3) for s in samples], "median_ms": round(statistics.median(samples), 3),
                "max_ms": round(max(samples), 3), "round_trip_us": round(rtt_us, 2), "calls": calls,
                "within_bound": max(samples) <= bound}
            print(f"{fault}: resumed in median {statistics.median(samples):.1f} ms, max {max(samples):.1f} ms "
                  f"over {len(samples)} breaks (round trip {rtt_us:.1f} us; bound {bound:.1f} ms): "
                  f"{'within' if max(samples) <= bound else 'OVER'}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    print("wrote", a.out)
    return 0 if all(k["within_bound"] for k in result["kinds"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
