"""Stock PyTorch (the CUDA build from PyPI) through the shim, against rgpu-server on the fake
driver: everything that needs no kernel. Run by tests/e2e/test_torch.py with the venv's python
(scripts/setup_torch.sh); prints one line per check, "OK name" or "FAIL name: why", then a
summary, and exits non-zero if any check failed. Kernels do not run on the fake driver, so
nothing here computes on the device."""
import sys
import warnings

failures = 0


def check(name, cond, why=""):
    global failures
    if cond:
        print(f"OK {name}")
    else:
        failures += 1
        print(f"FAIL {name}: {why}")


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch

    check("is_available", torch.cuda.is_available())
check("no NVML warning", not any("NVML" in str(w.message) for w in caught), [str(w.message) for w in caught])
check("device_count", torch.cuda.device_count() == 1, torch.cuda.device_count())
name = torch.cuda.get_device_name(0)
check("device name", "H200" in name, name)
p = torch.cuda.get_device_properties(0)
check("capability", (p.major, p.minor) == (9, 0) and torch.cuda.get_device_capability(0) == (9, 0), (p.major, p.minor))
check("total_memory", p.total_memory == 143155 * 2**20, p.total_memory)
check("multi_processor_count", p.multi_processor_count == 132, p.multi_processor_count)

# Byte-exact round trips, every dtype family, sizes from empty to 37 MiB + 1 (several bulk frames).
gen = torch.Generator().manual_seed(7)
for n in [0, 1, 3, 4096, 1 << 20, 37 * (1 << 20) + 1]:
    src = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen)
    back = src.cuda().cpu()
    check(f"round trip uint8[{n}]", torch.equal(src, back))
for dt in [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool, torch.complex64]:
    src = torch.randn(513, 7, generator=gen).to(dt)
    dev = src.to("cuda")
    check(f"round trip {dt}", dev.device.type == "cuda" and torch.equal(src, dev.cpu()))
# A non-contiguous source goes through a contiguous copy first.
src = torch.arange(64 * 64, dtype=torch.int32).reshape(64, 64)
check("round trip transposed view", torch.equal(src.t().cuda().cpu(), src.t()))

# Pinned memory and non_blocking copies on a side stream, ordered by events.
pinned = torch.arange(1 << 16, dtype=torch.float32).pin_memory()
check("pin_memory", pinned.is_pinned())
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    d = pinned.to("cuda", non_blocking=True)
    out = torch.empty_like(pinned).pin_memory()
    out.copy_(d, non_blocking=True)
    ev = torch.cuda.Event()
    ev.record(s)
ev.synchronize()
check("non_blocking copies", torch.equal(out, pinned))
check("event query after sync", ev.query())
torch.cuda.current_stream().wait_stream(s)
torch.cuda.synchronize()

# Memory statistics of the caching allocator (kept by torch, fed by cuMemAlloc/cuMemGetInfo).
torch.cuda.empty_cache()
torch.cuda.reset_peak_memory_stats()
base = torch.cuda.memory_allocated()
t = torch.empty(10 * 2**20, dtype=torch.uint8, device="cuda")
check("memory_allocated", torch.cuda.memory_allocated() - base == 10 * 2**20, torch.cuda.memory_allocated() - base)
check("memory_reserved", torch.cuda.memory_reserved() >= 10 * 2**20, torch.cuda.memory_reserved())
del t
check("max_memory_allocated", torch.cuda.max_memory_allocated() - base >= 10 * 2**20)
check("memory_allocated after free", torch.cuda.memory_allocated() == base)
free, total = torch.cuda.mem_get_info()
check("mem_get_info", total == 143155 * 2**20 and 0 < free <= total, (free, total))
check("memory_stats", torch.cuda.memory_stats()["allocation.all.allocated"] >= 1)

print(f"torch_on_fake: {failures} failed")
sys.exit(1 if failures else 0)
