"""One rank of PyTorch DistributedDataParallel training (issue 19): the GPT-2-small model of
bench/train_bench.py (or its tiny one), NCCL backend, rank r on cuda:r, its own batch (seed 1 + r),
bf16 autocast and AdamW as train_bench.py trains it. Run by tests/gpu/multigpu.sh as RANK
0..WORLD_SIZE-1 (MASTER_ADDR, MASTER_PORT set), once locally and once through rgpu, to compare
losses and step times.

Deterministic algorithms are asked for (warn only), and attention runs as PyTorch's math backend
(matmuls and a softmax; --attention auto leaves the choice to PyTorch, whose fused backends'
backward passes are not deterministic: flash, memory-efficient and cuDNN all say so), so that two
runs on the same GPUs can agree bit for bit: with two ranks an all-reduce's sum is a + b, the same
in any order, so what remains to differ is the kernels' own. Writes OUT (one JSON per rank): this rank's losses as exact
strings, the median step time after the warm-up steps (each step ends on loss.item())."""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read at cuBLAS's start: deterministic GEMMs
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../bench"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from train_bench import model_and_batch  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--model", choices=["gpt2", "small", "tiny"], default="gpt2")
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--warmup", type=int, default=5)
ap.add_argument("--attention", choices=["math", "auto"], default="math")
ap.add_argument("--out", required=True)
a = ap.parse_args()

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.use_deterministic_algorithms(True, warn_only=True)
torch.backends.cudnn.benchmark = False
torch.cuda.set_device(rank)
dev = torch.device("cuda", rank)
dist.init_process_group("nccl", rank=rank, world_size=world)

model, data, V = model_and_batch(a.model)  # the same initial weights on every rank (seed 0)
if rank:  # another batch of the same shape for each other rank
    data = torch.randint(0, V, tuple(data.shape), generator=torch.Generator().manual_seed(1 + rank))
model = torch.nn.parallel.DistributedDataParallel(model.to(dev), device_ids=[rank])
batch = data.to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
attention = (lambda: sdpa_kernel(SDPBackend.MATH)) if a.attention == "math" else contextlib.nullcontext
times, losses = [], []
for i in range(a.steps):
    t = time.perf_counter()
    with attention(), torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V).float(), batch[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    times.append(time.perf_counter() - t)
dist.barrier()
dist.destroy_process_group()
steady = times[a.warmup:] or times
res = {"rank": rank, "world": world, "model": a.model, "through_rgpu": bool(os.environ.get("RGPU_SERVER")),
       "attention": a.attention, "steps": a.steps, "warmup": a.warmup, "step_ms_median": 1000 * statistics.median(steady),
       "step_ms_min": 1000 * min(steady), "losses": [repr(v) for v in losses]}
json.dump(res, open(a.out, "w"), indent=1)
print(f"rank {rank}: {a.model}, median step {res['step_ms_median']:.2f} ms, loss {losses[0]:.4f} -> {losses[-1]:.4f}",
      flush=True)
