#!/usr/bin/env python3
"""Bulk copies and checkpoints of the PyTorch device against the driver path (issue 14, items 8, 9).

Runs on one machine, over loopback:
- the driver path: bench/driver_bench.c --bulk-only BYTES through the shim (build/lib/libcuda.so.1)
  to an rgpu-server on --driver fake (cuMemcpyHtoD / cuMemcpyDtoH of a touched pageable buffer,
  best of 3);
- the torch device: `h.to("rgpu")` (then rgpu.synchronize(), so the server has the bytes) and
  `d.cpu()` against an rgpu-opserver --device cpu, best of 3 per round; also `d.copy_(h)` and
  `out.copy_(d)` into tensors that exist already (no fresh memory on either side);
interleaved size by size (driver, torch, driver, torch, ...) so that drift on a shared machine moves
both alike; ratios are torch / driver of the medians over the rounds. Then the round trips of
saving a 4-layer model: rgpu.stats() waits per torch.save(model.state_dict()), per
`{k: v.cpu() for ...}` and per torch.save(optimizer.state_dict()).

Usage: bench/torch_bench.py [--out FILE.json] [--sizes 64M,1G] [--rounds 3] [--quick]
Env:   RGPU_BUILD_DIR (default <repo>/build): bin/rgpu-server, bin/rgpu-opserver, bin/driver_bench,
       lib/libcuda.so.1, lib/librgpu_torch.so and the tests/kernels image. See bench/README.md.
"""
import argparse
import gc
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("RGPU_BUILD_DIR", ROOT / "build")).resolve()
TARGET = 0.8  # torch / driver bulk bandwidth, each direction (issue 14, item 9)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("IB")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


class Server:
    """A server process on a free loopback port, stopped at exit."""

    def __init__(self, args, log_path, ready):
        for _ in range(3):
            self.port = free_port()
            self.log_path = log_path
            self.log = open(log_path, "w")
            env = dict(os.environ)
            env.pop("RGPU_TOKEN", None)
            self.proc = subprocess.Popen([a.replace("PORT", str(self.port)) for a in args], stdout=self.log,
                                         stderr=subprocess.STDOUT, env=env)
            deadline = time.time() + 30
            while time.time() < deadline and self.proc.poll() is None:
                if ready(self):
                    return
                time.sleep(0.05)
            self.stop()
        raise RuntimeError(f"{args[0]} did not start; its log {log_path}:\n{Path(log_path).read_text()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def listening_line(server):
    # rgpu-server logs "listening on"; a probe connection would log an aborted handshake.
    return f"listening on 127.0.0.1:{server.port}" in Path(server.log_path).read_text()


def accepts(server):
    try:
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        return True
    except OSError:
        return False


def driver_bulk(server, image, nbytes, tmp):
    out = Path(tmp) / "driver_bench.json"
    env = dict(os.environ, LD_LIBRARY_PATH=str(BUILD / "lib"), RGPU_SERVER=f"127.0.0.1:{server.port}",
               RGPU_BENCH_MODE="rgpu")
    env.pop("RGPU_TOKEN", None)
    subprocess.run([str(BUILD / "bin" / "driver_bench"), str(image), str(out), "--bulk-only", str(nbytes)], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    r = json.loads(out.read_text())
    return {"upload_gbps": r["htod_gbps"], "download_gbps": r["dtoh_gbps"]}


def best(fn, reps=3):
    times = []
    for _ in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def torch_bulk(torch, rgpu, nbytes):
    n = nbytes // 4
    host = torch.empty(n, dtype=torch.int32)
    host.copy_(torch.arange(n, dtype=torch.int32))  # touched: page faults are not part of the copy
    dev = host.to("rgpu")
    rgpu.synchronize()
    out = torch.empty_like(host)
    out.copy_(dev)  # warm-up, and touches out
    holder = {}

    def upload():
        holder["d"] = None
        holder["d"] = host.to("rgpu")
        rgpu.synchronize()

    def download():
        holder["h"] = None
        holder["h"] = dev.cpu()

    def upload_into():
        dev.copy_(host)
        rgpu.synchronize()

    def download_into():
        out.copy_(dev)

    r = {
        "upload_gbps": nbytes / best(upload) / 1e9,
        "download_gbps": nbytes / best(download) / 1e9,
        "upload_into_gbps": nbytes / best(upload_into) / 1e9,
        "download_into_gbps": nbytes / best(download_into) / 1e9,
    }
    if not torch.equal(holder["h"], host) or not torch.equal(out, host) or not torch.equal(holder["d"].cpu(), host):
        raise RuntimeError("torch_bench: the bytes read back differ from those written")
    return r


def checkpoint_waits(torch, rgpu):
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(256, 256), torch.nn.LayerNorm(256)]
    model = torch.nn.Sequential(*layers).to("rgpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(8, 256, device="rgpu")).sum().backward()
    opt.step()

    def waits_of(fn):
        rgpu.synchronize()
        before = rgpu.stats()["waits"]
        fn()
        return rgpu.stats()["waits"] - before

    return {
        "model": "4 x (Linear(256, 256), LayerNorm(256))",
        "tensors": len(model.state_dict()),
        "save_state_dict": waits_of(lambda: torch.save(model.state_dict(), io.BytesIO())),
        "state_dict_to_cpu": waits_of(lambda: {k: v.cpu() for k, v in model.state_dict().items()}),
        "save_optimizer_state_dict": waits_of(lambda: torch.save(opt.state_dict(), io.BytesIO())),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "torch_bench.json"))
    ap.add_argument("--sizes", default="64M,1G")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="64M only, 2 rounds")
    a = ap.parse_args()
    sizes = [64 << 20] if a.quick else [parse_size(s) for s in a.sizes.split(",")]
    rounds = 2 if a.quick else a.rounds
    image = Path(os.environ.get("RGPU_BENCH_IMAGE", BUILD / "tests" / "kernels" / "test_kernels.fatbin"))
    for f in [BUILD / "bin" / x for x in ("rgpu-server", "rgpu-opserver", "driver_bench")] + [
            BUILD / "lib" / "libcuda.so.1", BUILD / "lib" / "librgpu_torch.so", image]:
        if not f.exists():
            sys.exit(f"torch_bench: {f} is missing; build first: cmake --build {BUILD}")
    out_path = Path(a.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory() as tmp:
        driver = Server([str(BUILD / "bin" / "rgpu-server"), "--listen", "127.0.0.1:PORT", "--driver", "fake"],
                        Path(tmp) / "rgpu-server.log", listening_line)
        opserver = Server([str(BUILD / "bin" / "rgpu-opserver"), "--device", "cpu", "--listen", "127.0.0.1:PORT"],
                          Path(tmp) / "rgpu-opserver.log", accepts)
        try:
            os.environ["RGPU_OPSERVER"] = f"127.0.0.1:{opserver.port}"
            os.environ.pop("RGPU_TOKEN", None)
            os.environ["RGPU_BUILD_DIR"] = str(BUILD)
            sys.path.insert(0, str(ROOT / "python"))
            import torch
            import rgpu

            results = {"machine": os.uname().nodename, "cpus": os.cpu_count(), "torch": torch.__version__,
                       "rounds": rounds, "target_ratio": TARGET, "bulk": []}
            for nbytes in sizes:
                runs = []
                for k in range(rounds):
                    d = driver_bulk(driver, image, nbytes, tmp)
                    t = torch_bulk(torch, rgpu, nbytes)
                    runs.append({"driver": d, "torch": t})
                    print(f"{nbytes >> 20:6d} MiB round {k}: driver up {d['upload_gbps']:.2f} down "
                          f"{d['download_gbps']:.2f} GB/s; torch up {t['upload_gbps']:.2f} down "
                          f"{t['download_gbps']:.2f} (into existing {t['upload_into_gbps']:.2f} / "
                          f"{t['download_into_gbps']:.2f}) GB/s", flush=True)
                row = {"bytes": nbytes, "runs": runs}
                for side in ("driver", "torch"):
                    keys = runs[0][side].keys()
                    row[side] = {key: statistics.median(r[side][key] for r in runs) for key in keys}
                for key in ("upload_gbps", "download_gbps"):
                    row[key.replace("_gbps", "_ratio")] = row["torch"][key] / row["driver"][key]
                row["pass"] = row["upload_ratio"] >= TARGET and row["download_ratio"] >= TARGET
                results["bulk"].append(row)
            results["checkpoint_waits"] = checkpoint_waits(torch, rgpu)
            results["pass"] = all(r["pass"] for r in results["bulk"]) and results["checkpoint_waits"][
                "save_state_dict"] <= 2 and results["checkpoint_waits"]["state_dict_to_cpu"] <= 2
        finally:
            opserver.stop()
            driver.stop()
    out_path.write_text(json.dumps(results, indent=2) + "\n")
    for r in results["bulk"]:
        print(f"{r['bytes'] >> 20:6d} MiB median: upload torch {r['torch']['upload_gbps']:.2f} / driver "
              f"{r['driver']['upload_gbps']:.2f} GB/s = {r['upload_ratio']:.2f}; download torch "
              f"{r['torch']['download_gbps']:.2f} / driver {r['driver']['download_gbps']:.2f} GB/s = "
              f"{r['download_ratio']:.2f} ({'pass' if r['pass'] else 'FAIL'}, target {TARGET})")
    print("waits:", json.dumps(results["checkpoint_waits"]))
    print(f"wrote {out_path}")
    return 0 if results["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
