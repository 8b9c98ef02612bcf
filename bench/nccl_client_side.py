#!/usr/bin/env python3
"""NCCL running on the client, over the driver shim: does it work, and what does it cost (issue 19,
item 4, "measure first, then choose")?

Runs torch.distributed with the NCCL backend in this process (one rank: the GPU machine lent has
one GPU), times communicator creation and an all-reduce sweep, and writes JSON. Run it twice on the
GPU host, once locally and once through rgpu (LD_LIBRARY_PATH=build/lib, RGPU_SERVER=...), and
compare: bench/nccl_client_side.py --out local.json; then the same with the shim.

Usage: bench/nccl_client_side.py --out FILE.json [--max-bytes 1G] [--iters 20]
"""
import argparse
import json
import os
import socket
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-bytes", default=str(1 << 30))
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    max_bytes = int(float(a.max_bytes.rstrip("G")) * (1 << 30)) if a.max_bytes.endswith("G") else int(a.max_bytes)

    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    result = {"through_rgpu": "RGPU_SERVER" in os.environ, "ranks": 1, "torch": torch.__version__}
    t0 = time.perf_counter()
    torch.cuda.init()
    result["cuda_init_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    x = torch.ones(1, device="cuda")
    dist.all_reduce(x)  # the communicator is made lazily, at the first collective
    torch.cuda.synchronize()
    result["init_and_first_all_reduce_s"] = time.perf_counter() - t0
    result["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
    sweep = []
    n = 8
    while n <= max_bytes:
        x = torch.ones(max(n // 4, 2), device="cuda")
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / a.iters
        ok = bool(torch.all(x == 1).item())  # one rank: the sum is the tensor itself
        sweep.append({"bytes": n, "us": dt * 1e6, "algbw_gbps": n / dt / 1e9, "correct": ok})
        print(f"all_reduce {n:>11} B {dt * 1e6:10.1f} us {n / dt / 1e9:8.2f} GB/s {'ok' if ok else 'WRONG'}",
              flush=True)
        n *= 8 if n < (1 << 20) else 4
    result["all_reduce"] = sweep
    dist.destroy_process_group()
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    big = sweep[-1]
    print(f"summary: NCCL {result['nccl_version']}, init and first all-reduce {result['init_and_first_all_reduce_s']:.2f} s; "
          f"all-reduce 8 B {sweep[0]['us']:.1f} us, {big['bytes'] >> 20} MiB {big['us']:.1f} us; "
          f"all correct: {all(x['correct'] for x in sweep)}")
    print("wrote", a.out)


if __name__ == "__main__":
    main()
