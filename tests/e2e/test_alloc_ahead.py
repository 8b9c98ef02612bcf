"""Allocations ahead (client/device_memory.h): repeated cuMemAlloc calls of one size cost a
round trip only on each refill (1, 2, 4, ... more each time), every allocation handed out is
distinct and usable, and when the GPU is out of memory the allocations held ahead are given back
before the program is told so. Drives the shim with ctypes on the fake driver (143771 MiB, whose
allocations are host memory that is never touched here)."""
import json
import os
import textwrap

from conftest import BUILD, SHIM_PREAMBLE, run_client, run_script_runs

SCRIPT = SHIM_PREAMBLE + textwrap.dedent(r"""
    import json
    MiB = 1 << 20
    def asks():
        ok(cu.rgpu_stats_write(), "stats")
        return json.load(open(os.environ["RGPU_STATS"]))["calls"].get("control:45", 0)
    ptrs = []
    for i in range(15):
        p = ctypes.c_uint64()
        ok(cu.cuMemAlloc_v2(ctypes.byref(p), 2 * MiB), "alloc")
        ptrs.append(p.value)
    print("asks:", asks())
    print("distinct:", len(set(ptrs)) == len(ptrs))
    # Each one is real memory of its own: a pattern per allocation survives the others.
    for i, p in enumerate(ptrs):
        ok(cu.cuMemsetD32_v2(ctypes.c_uint64(p), i + 1, (2 * MiB) // 4), "memset")
    got = []
    for p in ptrs:
        v = ctypes.c_uint32()
        ok(cu.cuMemcpyDtoH_v2(ctypes.byref(v), ctypes.c_uint64(p + 2 * MiB - 4), 4), "DtoH")
        got.append(v.value)
    print("patterns:", got == list(range(1, 16)))
    # Freed and allocated again: still right.
    ok(cu.cuMemFree_v2(ctypes.c_uint64(ptrs[0])), "free")
    p = ctypes.c_uint64()
    ok(cu.cuMemAlloc_v2(ctypes.byref(p), 2 * MiB), "alloc again")
    # Fill the device, then ask for a little more than is left: only the allocations held ahead
    # (three 2 MiB ones by then: 4 asks made 4 + 15 allocations, 16 were handed out) make room.
    free_, total = ctypes.c_size_t(), ctypes.c_size_t()
    ok(cu.cuMemGetInfo_v2(ctypes.byref(free_), ctypes.byref(total)), "info")
    big = []
    while free_.value > 3 * (1 << 30):
        q = ctypes.c_uint64()
        ok(cu.cuMemAlloc_v2(ctypes.byref(q), ctypes.c_size_t(2 << 30)), "fill")
        big.append(q.value)
        ok(cu.cuMemGetInfo_v2(ctypes.byref(free_), ctypes.byref(total)), "info")
    q = ctypes.c_uint64()
    print("over:", cu.cuMemAlloc_v2(ctypes.byref(q), ctypes.c_size_t(free_.value + 2 * MiB)))
    print("beyond:", cu.cuMemAlloc_v2(ctypes.byref(q), ctypes.c_size_t(free_.value + 1024 * MiB)))
""")


def run(server, tmp_path, **env):
    stats = tmp_path / "stats.json"
    r = run_client(["python3", "-c", SCRIPT], server,
                   env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_STATS": str(stats), **env})
    assert r.returncode == 0, r.stdout + r.stderr
    return dict(line.split(": ", 1) for line in r.stdout.splitlines())


def test_repeated_sizes_ask_once_per_refill_and_out_of_memory_gives_back(server, tmp_path):
    out = run(server, tmp_path)
    assert out["asks"] == "4"  # 1 (+1 ahead), 3 (+2), 6 (+4), 11 (+8): 15 allocations
    assert out["distinct"] == "True" and out["patterns"] == "True"
    assert out["over"] == "0"     # room made by giving back what was held ahead
    assert out["beyond"] == "2"   # CUDA_ERROR_OUT_OF_MEMORY when even that is not enough


def test_alloc_ahead_off_asks_every_time(server, tmp_path):
    out = run(server, tmp_path, RGPU_ALLOC_AHEAD="0")
    assert out["asks"] == "15"
    assert out["distinct"] == "True" and out["patterns"] == "True"


PREDICTED = SHIM_PREAMBLE + textwrap.dedent(r"""
    import json
    MiB = 1 << 20
    sizes = [3 * MiB] * 4 + [5 * MiB] * 2 + [7 * MiB, 64 * MiB, 64 * MiB, 1000]
    ptrs = []
    for size in sizes:
        p = ctypes.c_uint64()
        ok(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)), "alloc")
        ptrs.append(p.value)
    # Distinct, and each as large as asked: a pattern at its last word survives the others.
    for i, (p, size) in enumerate(zip(ptrs, sizes)):
        ok(cu.cuMemsetD32_v2(ctypes.c_uint64(p + size - 4), i + 1, 1), "memset")
    got = []
    for p, size in zip(ptrs, sizes):
        v = ctypes.c_uint32()
        ok(cu.cuMemcpyDtoH_v2(ctypes.byref(v), ctypes.c_uint64(p + size - 4), 4), "DtoH")
        got.append(v.value)
    print("right:", len(set(ptrs)) == len(ptrs) and got == list(range(1, len(sizes) + 1)))
    ok(cu.rgpu_stats_write(), "stats")
    calls = json.load(open(os.environ["RGPU_STATS"]))["calls"]
    print("asks:", calls.get("control:45", 0), calls.get("control:46", 0))
""")


def test_a_second_run_makes_the_last_runs_allocations_at_once(server, tmp_path):
    first, second = run_script_runs(server, tmp_path, PREDICTED)
    assert first["right"] == "True" and second["right"] == "True"
    assert first["asks"] == "6 0"   # 3 MiB: two (1 ahead, then 2); 5, 7, 64 MiB (1 ahead each), 1000
    assert second["asks"] == "0 1"  # everything in the first round trip



BIG = SHIM_PREAMBLE + textwrap.dedent(r"""
    import json
    GiB = 1 << 30
    # Memory someone else holds (the fake counts it per session, so this program holds it itself,
    # with an allocation call that is never predicted): 100 GiB of the fake's 140.
    for _ in range(int(sys.argv[1])):
        q = ctypes.c_uint64()
        ok(cu.cuMemAllocAsync(ctypes.byref(q), ctypes.c_size_t(10 * GiB), None), "hog")
    for _ in range(3):
        p = ctypes.c_uint64()
        ok(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(10 * GiB)), "alloc")  # host memory never touched
    ok(cu.rgpu_stats_write(), "stats")
    calls = json.load(open(os.environ["RGPU_STATS"]))["calls"]
    print("asks:", calls.get("control:45", 0), calls.get("control:46", 0))
""")


def test_predicted_allocations_leave_a_quarter_of_the_device_free(server, tmp_path):
    first, second = run_script_runs(server, tmp_path, BIG, args=["0"])
    assert (first["asks"], second["asks"]) == ("3 0", "0 1")  # 10 GiB allocations, predicted
    # With 100 GiB held, the 30 GiB predicted would leave less than a quarter of the device free:
    # the server makes none of it, and the three are asked one by one.
    third, = run_script_runs(server, tmp_path, BIG, args=["10"], runs=1)
    assert third["asks"] == "3 1", third
