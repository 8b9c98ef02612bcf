"""torch.distributed with the NCCL backend, stock PyTorch through rgpu's libcuda.so.1 and
libnccl.so.2, against rgpu-server on the fake driver and fake NCCL with RGPU_FAKE_NOOP_KERNELS=1
(kernels run as no-ops; copies and NCCL's collectives move real bytes). Run by
tests/e2e/test_torch_ddp.py as RANK 0..WORLD_SIZE-1, one process each, rank r on cuda:r.

What it checks, printing "OK name" or "FAIL name: why" and exiting non-zero on any failure:
- collectives on tensors whose bytes came from the host, byte for byte: all_reduce (sum of an
  odd-sized float tensor and of int64, avg, max), broadcast, all_gather_into_tensor,
  reduce_scatter_tensor, all_to_all_single, batch_isend_irecv, barrier, and a new_group;
- data-parallel training whose gradients are averaged by all_reduce on the GPU: each rank
  computes its half of the batch on the CPU (the fake computes nothing), the gradients go to
  cuda:r, through NCCL and back; the losses must equal a single-process run on the whole batch;
- DistributedDataParallel itself runs a few steps (construction's broadcast, the reducer's bucket
  all-reduces, the optimizer), with no error; its numbers mean nothing on the fake."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
failures = 0


def check(name, cond, why=""):
    global failures
    if cond:
        print(f"OK {name}", flush=True)
    else:
        failures += 1
        print(f"FAIL {name}: {why}", flush=True)


torch.cuda.set_device(rank)
dev = torch.device("cuda", rank)
dist.init_process_group("nccl", rank=rank, world_size=world)
check("backend", dist.get_backend() == "nccl")


def on_gpu(t):
    return t.to(dev)  # a copy: the fake's kernels would leave a device-made tensor empty


# all_reduce: odd sizes, exact sums (small integers in float).
n = 1_000_003
mine = (torch.arange(n, dtype=torch.float32) % 61) - 20 + rank
want = sum((torch.arange(n, dtype=torch.float32) % 61) - 20 + r for r in range(world))
t = on_gpu(mine)
dist.all_reduce(t)
check("all_reduce float sum of 1000003", torch.equal(t.cpu(), want))
t = on_gpu(torch.tensor([rank * 10**12 + 7, -rank, 3], dtype=torch.int64))
dist.all_reduce(t)
check("all_reduce int64 sum", t.cpu().tolist() == [sum(r * 10**12 + 7 for r in range(world)), -sum(range(world)), 3 * world])
t = on_gpu(torch.tensor([float(rank), 2.0 * rank], dtype=torch.float64))
dist.all_reduce(t, op=dist.ReduceOp.AVG)
avg = sum(range(world)) / world
check("all_reduce avg", t.cpu().tolist() == [avg, 2 * avg], t.cpu().tolist())
t = on_gpu(torch.tensor([rank, -rank], dtype=torch.int32))
dist.all_reduce(t, op=dist.ReduceOp.MAX)
check("all_reduce max", t.cpu().tolist() == [world - 1, 0])
# broadcast from the last rank, 12345 bytes.
b = on_gpu(torch.arange(12345, dtype=torch.int64).remainder(251).to(torch.uint8) + rank)
dist.broadcast(b, src=world - 1)
check("broadcast", torch.equal(b.cpu(), torch.arange(12345).remainder(251).to(torch.uint8) + (world - 1)))
# all_gather_into_tensor and reduce_scatter_tensor.
g = on_gpu(torch.empty(world * 1001, dtype=torch.int32))
dist.all_gather_into_tensor(g, on_gpu(torch.full((1001,), rank, dtype=torch.int32)))
check("all_gather_into_tensor", torch.equal(g.cpu(), torch.arange(world, dtype=torch.int32).repeat_interleave(1001)))
rs = on_gpu(torch.empty(333, dtype=torch.float32))
dist.reduce_scatter_tensor(rs, on_gpu(torch.arange(world * 333, dtype=torch.float32) + rank))
expect = sum(torch.arange(world * 333, dtype=torch.float32)[rank * 333:(rank + 1) * 333] + r for r in range(world))
check("reduce_scatter_tensor", torch.equal(rs.cpu(), expect))
a2a = on_gpu(torch.empty(world * 5, dtype=torch.int64))
dist.all_to_all_single(a2a, on_gpu(torch.arange(world * 5, dtype=torch.int64) + 100 * rank))
expect = torch.cat([torch.arange(rank * 5, rank * 5 + 5) + 100 * r for r in range(world)])
check("all_to_all_single", torch.equal(a2a.cpu(), expect), a2a.cpu().tolist())
# Point to point, a ring, as one batch (a group).
send = on_gpu(torch.arange(77777, dtype=torch.int64) + rank)
recv = on_gpu(torch.empty(77777, dtype=torch.int64))
ops = [dist.P2POp(dist.irecv, recv, (rank - 1) % world), dist.P2POp(dist.isend, send, (rank + 1) % world)]
for w in dist.batch_isend_irecv(ops):
    w.wait()
check("batch_isend_irecv ring", torch.equal(recv.cpu(), torch.arange(77777) + (rank - 1) % world))
dist.barrier()
check("barrier", True)
group = dist.new_group(list(range(world)))
t = on_gpu(torch.tensor([1.0 + rank]))
dist.all_reduce(t, group=group)
check("new_group all_reduce", t.cpu().item() == sum(1.0 + r for r in range(world)))

# Data-parallel training with the gradients averaged through NCCL, against one process's run.
torch.manual_seed(0)
x_all, y_all = torch.randn(16, 8, dtype=torch.float64), torch.randn(16, 1, dtype=torch.float64)


def make_model():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).double()


def train(model, x, y, steps, average):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        average(model)
        opt.step()
        loss_all = on_gpu(loss.detach().reshape(1))
        dist.all_reduce(loss_all, op=dist.ReduceOp.AVG)
        losses.append(loss_all.cpu().item())
    return losses


def nccl_average(model):
    flat = on_gpu(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    dist.all_reduce(flat, op=dist.ReduceOp.AVG)
    flat = flat.cpu()
    at = 0
    for p in model.parameters():
        p.grad.copy_(flat[at:at + p.numel()].view_as(p))
        at += p.numel()


per = 16 // world
dp_losses = train(make_model(), x_all[rank * per:(rank + 1) * per], y_all[rank * per:(rank + 1) * per], 5, nccl_average)
ref_model, ref_losses = make_model(), []
opt = torch.optim.SGD(ref_model.parameters(), lr=0.1)
for _ in range(5):
    opt.zero_grad()
    # The mean over the whole batch, as the ranks' mean of their halves' means.
    loss = sum(nn.functional.mse_loss(ref_model(x_all[r * per:(r + 1) * per]), y_all[r * per:(r + 1) * per]) for r in range(world)) / world
    loss.backward()
    opt.step()
    ref_losses.append(loss.item())
close = all(abs(a - b) <= 1e-12 * max(1.0, abs(b)) for a, b in zip(dp_losses, ref_losses))
check("data-parallel losses equal one process's", close, f"{dp_losses} vs {ref_losses}")
print("losses", " ".join(f"{v:.17g}" for v in dp_losses), flush=True)

# DistributedDataParallel runs (no-op kernels: the path, not the numbers).
model = nn.Linear(64, 64).to(dev)
ddp = nn.parallel.DistributedDataParallel(model, device_ids=[rank], bucket_cap_mb=1)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
for _ in range(3):
    opt.zero_grad()
    ddp(on_gpu(torch.randn(4, 64))).sum().backward()
    opt.step()
torch.cuda.synchronize()
check("DistributedDataParallel steps", True)

dist.destroy_process_group()
print(f"torch_ddp_on_fake rank {rank}: {failures} failed", flush=True)
sys.exit(1 if failures else 0)
