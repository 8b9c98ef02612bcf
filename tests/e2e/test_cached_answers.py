"""Answers kept on the client (client/driver/cached_answers.h, client/driver/context.cpp): asking
again costs no round trip, the answers stay right when the program changes them, and the state of
primary contexts is tracked locally. Drives the shim in-process with ctypes; the RGPU_STATS counters
(written mid-run by rgpu_stats_write) show what crossed the network."""
import ctypes
import json
import os
import subprocess
import sys
import textwrap

from conftest import BUILD, IMAGE, SHIM_PREAMBLE, run_client, run_script_runs

SCRIPT = textwrap.dedent(r"""
    import ctypes, json, os, sys
    cu = ctypes.CDLL(os.environ["SHIM"])
    def ok(rc, what):
        if rc != 0:
            print(f"FAIL {what}: {rc}"); sys.exit(1)
    ok(cu.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    flags, active = ctypes.c_uint(), ctypes.c_int()
    for _ in range(1000):
        ok(cu.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)), "GetState")
    assert (flags.value, active.value) == (0, 0), (flags.value, active.value)
    ok(cu.cuDevicePrimaryCtxSetFlags_v2(dev, 4), "SetFlags")  # CU_CTX_SCHED_BLOCKING_SYNC
    ctx = ctypes.c_void_p()
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "Retain")
    # Further retains of a held primary context: the same handle, counted on the server one-way.
    for _ in range(5):
        again = ctypes.c_void_p()
        ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(again), dev), "Retain again")
        assert again.value == ctx.value, (again.value, ctx.value)
    for _ in range(5):
        ok(cu.cuDevicePrimaryCtxRelease_v2(dev), "Release")
    ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
    ok(cu.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)), "GetState")
    assert (flags.value, active.value) == (4, 1), (flags.value, active.value)
    # A bad device is still refused.
    assert cu.cuDevicePrimaryCtxGetState(99, ctypes.byref(flags), ctypes.byref(active)) == 101
    # Limits: asked once, until the program sets one.
    v = ctypes.c_size_t()
    for _ in range(100):
        ok(cu.cuCtxGetLimit(ctypes.byref(v), 2), "GetLimit")  # CU_LIMIT_MALLOC_HEAP_SIZE
    ok(cu.cuCtxSetLimit(2, 16 << 20), "SetLimit")
    ok(cu.cuCtxGetLimit(ctypes.byref(v), 2), "GetLimit after set")
    assert v.value == 16 << 20, v.value
    # Function attributes: asked once per (function, attribute).
    img = open(sys.argv[1], "rb").read()
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuModuleLoadData(ctypes.byref(mod), img), "load")
    ok(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"rgpu_vec_add"), "function")
    a = ctypes.c_int()
    for _ in range(100):
        ok(cu.cuFuncGetAttribute(ctypes.byref(a), 0, fn), "FuncGetAttribute")  # MAX_THREADS_PER_BLOCK
    # Every attribute came with the first answer (kOpFuncAttributes): the others cost nothing.
    for attr in range(1, 9):
        ok(cu.cuFuncGetAttribute(ctypes.byref(a), attr, fn), f"FuncGetAttribute {attr}")
    blocks = ctypes.c_int()
    for _ in range(100):
        ok(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(blocks), fn, 256, ctypes.c_size_t(0)), "occ")
    # One CUfunction per kernel and context, as the driver hands out.
    lib, kern = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuLibraryLoadData(ctypes.byref(lib), img, None, None, 0, None, None, 0), "library")
    ok(cu.cuLibraryGetKernel(ctypes.byref(kern), lib, b"rgpu_vec_add"), "kernel")
    fns = set()
    for _ in range(5):
        f = ctypes.c_void_p()
        ok(cu.cuKernelGetFunction(ctypes.byref(f), kern), "GetFunction")
        fns.add(f.value)
    assert len(fns) == 1, fns
    # A kernel's attribute set through the kernel is what its function reports (cuBLAS raises the
    # dynamic shared memory with cuKernelSetAttribute and reads it back through the function).
    f = ctypes.c_void_p(fns.pop())
    ok(cu.cuFuncGetAttribute(ctypes.byref(a), 8, f), "FuncGetAttribute dynamic shared")  # MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert a.value == 49152, a.value
    ok(cu.cuKernelSetAttribute(8, 100000, kern, dev), "KernelSetAttribute")
    ok(cu.cuFuncGetAttribute(ctypes.byref(a), 8, f), "FuncGetAttribute after kernel set")
    assert a.value == 100000, a.value
    ok(cu.cuKernelGetAttribute(ctypes.byref(a), 8, kern, dev), "KernelGetAttribute after kernel set")
    assert a.value == 100000, a.value
    # A kernel's set forgets its own answers, not another function's occupancy (PyTorch sets 26
    # kernels' attributes at start-up; forgetting all made it ask 82 cluster questions at 30 ms).
    for _ in range(10):
        ok(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(blocks), fn, 256, ctypes.c_size_t(0)), "occ again")
    for _ in range(10):  # one-way, and sent once
        ok(cu.cuFuncSetAttribute(f, 8, 70000), "FuncSetAttribute")
    # The kernel keeps its own value, as on driver 580 (the H200 probe of f2b5ace; the fake since
    # 15c3781): a set on the kernel's function changes what its launches may use, not the kernel's.
    ok(cu.cuKernelGetAttribute(ctypes.byref(a), 8, kern, dev), "KernelGetAttribute after function set")
    assert a.value == 100000, a.value
    # The same value set again and again (PyTorch, before launches) is sent once.
    for _ in range(10):
        ok(cu.cuKernelSetAttribute(8, 60000, kern, dev), "KernelSetAttribute repeated")
    ok(cu.cuFuncGetAttribute(ctypes.byref(a), 8, f), "FuncGetAttribute after repeated sets")
    assert a.value == 60000, a.value
    # Parameter layouts come from the image; past the last parameter is an error, also locally.
    off, size = ctypes.c_size_t(), ctypes.c_size_t()
    for _ in range(10):
        ok(cu.cuKernelGetParamInfo(kern, 0, ctypes.byref(off), ctypes.byref(size)), "KernelGetParamInfo")
        assert cu.cuKernelGetParamInfo(kern, 99, ctypes.byref(off), ctypes.byref(size)) == 1
        ok(cu.cuFuncGetParamInfo(f, 0, ctypes.byref(off), ctypes.byref(size)), "FuncGetParamInfo")
    # The loading mode is the server's for its life: it comes with the snapshot.
    mode = ctypes.c_int()
    for _ in range(10):
        ok(cu.cuModuleGetLoadingMode(ctypes.byref(mode)), "GetLoadingMode")
    # Cluster occupancy: once per (function, configuration but the grid); a new block size asks again.
    class Config(ctypes.Structure):
        _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                    ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("nattrs", ctypes.c_uint)]
    clusters = ctypes.c_int()
    for block, grid in ((128, 1), (128, 7), (128, 64), (256, 1), (256, 3)):
        cfg = Config((grid, 1, 1), (block, 1, 1), 0, None, None, 0)
        ok(cu.cuOccupancyMaxActiveClusters(ctypes.byref(clusters), f, ctypes.byref(cfg)), "MaxActiveClusters")
    # A probe of cluster widths 1, 2, ... (grid one cluster wide), as a PyTorch kernel makes at
    # start-up: one round trip answers 32 widths (kOpClusterOccupancyTable), refusals included.
    class Attr(ctypes.Structure):
        _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("dim", ctypes.c_uint * 3), ("rest", ctypes.c_ubyte * 52)]
    assert ctypes.sizeof(Attr) == 72
    widths = {}
    for width in range(1, 21):
        attr = Attr(4, 0, (width, 1, 1))  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        cfg = Config((width, 1, 1), (128, 1, 1), 0, None, ctypes.cast(ctypes.pointer(attr), ctypes.c_void_p), 1)
        widths[width] = cu.cuOccupancyMaxActiveClusters(ctypes.byref(clusters), f, ctypes.byref(cfg)), clusters.value
    assert all(widths[w][0] == 0 and widths[w][1] > 0 for w in range(1, 17)), widths
    assert all(widths[w][0] == 912 for w in range(17, 21)), widths  # CUDA_ERROR_INVALID_CLUSTER_SIZE
    ok(cu.cuCtxSynchronize(), "sync")
    ok(cu.rgpu_stats_write(), "stats")
    print(json.dumps(json.load(open(os.environ["RGPU_STATS"]))["calls"]))
""")


def test_repeated_questions_cost_one_round_trip_and_stay_right(server, tmp_path):
    stats = tmp_path / "stats.json"
    script = tmp_path / "ask.py"
    script.write_text(SCRIPT)
    r = run_client([sys.executable, str(script), IMAGE], server,
                   env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_STATS": str(stats)})
    assert r.returncode == 0, r.stdout + r.stderr
    calls = json.loads(r.stdout.strip().splitlines()[-1])
    assert "cuDevicePrimaryCtxGetState" not in calls, calls
    assert calls.get("cuDevicePrimaryCtxRetain") == 6, calls
    waited = {o["op"]: o["waited"] for o in json.loads(stats.read_text())["ops"]}
    assert waited.get("cuDevicePrimaryCtxRetain") == 1, waited  # the first only
    assert calls.get("cuCtxGetLimit") == 2, calls  # once before the set, once after
    # Attributes come all at once (control op 43, kOpFuncAttributes): fn once; f first, after the
    # kernel's set and after the repeated sets; the kernel after its set and after f's set.
    assert "cuFuncGetAttribute" not in calls and "cuKernelGetAttribute" not in calls, calls
    assert calls.get("control:43") == 6, calls
    assert calls.get("cuKernelSetAttribute") == 2, calls
    assert calls.get("cuFuncSetAttribute") == 1, calls  # 100000 once, 60000 once (after a function's set)
    assert "cuKernelGetParamInfo" not in calls and "cuFuncGetParamInfo" not in calls, calls
    assert "cuModuleGetLoadingMode" not in calls, calls  # in the snapshot
    assert calls.get("cuOccupancyMaxActiveClusters") == 2, calls  # the two shapes without a cluster
    assert calls.get("control:44") == 1, calls  # the whole probe of widths 1..20
    assert calls.get("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags") == 1, calls
    assert calls.get("cuKernelGetFunction") == 1, calls


def test_a_second_run_asks_nothing_about_kernels(server, tmp_path):
    """The same program again, with answers kept in a file (client/answer_store.h): attributes,
    occupancy and cluster occupancy come from the file, before and after the attribute sets, and
    the script's own checks of their values still hold."""
    script = tmp_path / "ask.py"
    script.write_text(SCRIPT)
    store = tmp_path / "answers.txt"
    runs = []
    for _ in range(2):
        r = run_client([sys.executable, str(script), IMAGE], server,
                       env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_STATS": str(tmp_path / "s.json"),
                                  "RGPU_ANSWER_CACHE": str(store)})
        assert r.returncode == 0, r.stdout + r.stderr
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    first, second = runs
    # 5, not 6: the kernel's attributes after its set are its function's, already asked this run.
    assert first.get("control:43") == 5 and first.get("control:44") == 1, first
    assert first.get("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags") == 1, first
    for asked in ("control:43", "control:44", "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"):
        assert asked not in second, second
    lines = store.read_text().splitlines()
    assert len(lines) == 8 and all(line.count("\t") == 1 for line in lines), lines


def test_answer_file_lines_that_do_not_parse_are_asked_again(server, tmp_path):
    script = tmp_path / "ask.py"
    script.write_text(SCRIPT)
    store = tmp_path / "answers.txt"
    env = {"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_STATS": str(tmp_path / "s.json"), "RGPU_ANSWER_CACHE": str(store)}
    r = run_client([sys.executable, str(script), IMAGE], server, env_extra=env)
    assert r.returncode == 0, r.stdout + r.stderr
    # Every value spoiled (and a line cut short, as by a writer that died): all asked again, right.
    spoiled = [line.split("\t")[0] + "\tnot-a-number," for line in store.read_text().splitlines()]
    store.write_text("\n".join(spoiled) + "\nattrs|cut short")
    r = run_client([sys.executable, str(script), IMAGE], server, env_extra=env)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = json.loads(r.stdout.strip().splitlines()[-1])
    assert calls.get("control:43") == 5 and calls.get("control:44") == 1, calls



SMALL = SHIM_PREAMBLE + textwrap.dedent(r"""
    import json
    for _ in range(20):  # a known context: one-way
        ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuModuleLoadData(ctypes.byref(mod), open(sys.argv[1], "rb").read()), "load")
    ok(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"rgpu_vec_add"), "function")
    smem = ctypes.c_size_t()
    for _ in range(10):
        ok(cu.cuOccupancyAvailableDynamicSMemPerBlock(ctypes.byref(smem), fn, 4, 256), "AvailableDynamicSMem")
    print("smem:", smem.value)
    least, greatest, heap = ctypes.c_int(), ctypes.c_int(), ctypes.c_size_t()
    for _ in range(3):
        ok(cu.cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest)), "PriorityRange")
        ok(cu.cuCtxGetLimit(ctypes.byref(heap), 2), "GetLimit")  # CU_LIMIT_MALLOC_HEAP_SIZE
    print("priorities:", least.value, greatest.value, "heap:", heap.value)
    version, mode = ctypes.c_uint(), ctypes.c_int()
    for _ in range(3):
        ok(cu.cuCtxGetApiVersion(ctx, ctypes.byref(version)), "GetApiVersion")
        ok(cu.cuCtxGetApiVersion(None, ctypes.byref(version)), "GetApiVersion of the current context")
        ok(cu.cuModuleGetLoadingMode(ctypes.byref(mode)), "GetLoadingMode")
    print("api version:", version.value, "loading mode:", mode.value)
    # After a set, the limit is this context's own, never a stored default.
    ok(cu.cuCtxSetLimit(2, heap.value * 2), "SetLimit")
    ok(cu.cuCtxGetLimit(ctypes.byref(heap), 2), "GetLimit after set")
    print("heap after set:", heap.value)
    # An unknown context still goes to the server, which refuses it.
    print("bad:", cu.cuCtxSetCurrent(ctypes.c_void_p(0x1234)))
    ok(cu.rgpu_stats_write(), "stats")
    s = json.load(open(os.environ["RGPU_STATS"]))
    print("waited:", json.dumps({o["op"]: o["waited"] for o in s["ops"] + s["oneway_ops"]}))
""")


def test_set_current_is_one_way_and_dynamic_shared_memory_is_asked_once_ever(server, tmp_path):
    outs = run_script_runs(server, tmp_path, SMALL, args=[IMAGE])
    first, second = (json.loads(o["waited"]) for o in outs)
    assert first["cuCtxSetCurrent"] == 1, first  # the unknown one
    assert first["cuOccupancyAvailableDynamicSMemPerBlock"] == 1, first
    assert "cuOccupancyAvailableDynamicSMemPerBlock" not in second, second
    assert outs[0]["smem"] == outs[1]["smem"] and int(outs[0]["smem"]) > 0
    # Stream priorities and a fresh context's limits: asked once in the first run, kept for the
    # second; the limit after the set is asked in both.
    assert first["cuCtxGetStreamPriorityRange"] == 1 and "cuCtxGetStreamPriorityRange" not in second
    assert first["cuCtxGetLimit"] == 2 and second["cuCtxGetLimit"] == 1, (first, second)
    assert outs[0]["priorities"] == outs[1]["priorities"]
    # The context's API version: asked once, then kept; the loading mode came with the snapshot.
    assert first["cuCtxGetApiVersion"] == 1 and "cuCtxGetApiVersion" not in second, (first, second)
    assert "cuModuleGetLoadingMode" not in first, first
    assert outs[0]["api version"] == outs[1]["api version"]
    version, mode = outs[0]["api version"].split(" loading mode: ")
    assert int(version) > 0 and mode == "2"  # CU_MODULE_LAZY_LOADING, the fake's
    heap = int(outs[0]["priorities"].split()[-1])
    assert heap > 0 and outs[0]["heap after set"] == outs[1]["heap after set"] == str(heap * 2)
    assert outs[0]["bad"] != "0"


RELEASES = SHIM_PREAMBLE + textwrap.dedent(r"""
    import json
    for _ in range(3):  # four references in all
        ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "Retain")
    ptr, free0, free1, total = ctypes.c_uint64(), ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    ok(cu.cuMemGetInfo_v2(ctypes.byref(free0), ctypes.byref(total)), "MemGetInfo")
    ok(cu.cuMemAlloc_v2(ctypes.byref(ptr), 32 << 20), "alloc")
    for _ in range(4):
        ok(cu.cuDevicePrimaryCtxRelease_v2(0), "Release")
    # The last release destroyed the context and its memory; a new one starts empty.
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "Retain again")
    ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
    ok(cu.cuMemGetInfo_v2(ctypes.byref(free1), ctypes.byref(total)), "MemGetInfo")
    print("free before, after:", free0.value, free1.value)
    print("release after the last:", cu.cuDevicePrimaryCtxRelease_v2(0), cu.cuDevicePrimaryCtxRelease_v2(0))
    ok(cu.rgpu_stats_write(), "stats")
    s = json.load(open(os.environ["RGPU_STATS"]))
    print("waited:", json.dumps({o["op"]: o["waited"] for o in s["ops"] + s["oneway_ops"]}))
""")


def test_releases_that_leave_the_context_retained_do_not_wait(server, tmp_path):
    (out,) = run_script_runs(server, tmp_path, RELEASES, runs=1, env={"RGPU_ALLOC_AHEAD": "0"})
    waited = json.loads(out["waited"])
    # Three of the first four releases only count; the fourth and the two after the retain again wait.
    assert waited["cuDevicePrimaryCtxRelease_v2"] == 3, waited
    before, after = out["free before, after"].split()
    assert before == after, out
    assert out["release after the last"] == "0 201", out  # CUDA_ERROR_INVALID_CONTEXT: none left


JIT_LOAD = SHIM_PREAMBLE + textwrap.dedent(r"""
    import json
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuModuleLoadData(ctypes.byref(mod), open(sys.argv[1], "rb").read()), "load")
    ok(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"rgpu_vec_add"), "function")
    ok(cu.cuCtxSynchronize(), "sync")
    ok(cu.rgpu_stats_write(), "stats")
    s = json.load(open(os.environ["RGPU_STATS"]))
    print("waited:", json.dumps({o["op"]: o["waited"] for o in s["ops"] if o["waited"]}))
""")


def test_an_image_that_compiled_on_this_gpu_before_loads_one_way(server, tmp_path):
    """PTX only: the server compiles it, which can fail, so the first run's load waits; the
    second run knows it compiled on this GPU and driver, and does not wait."""
    outs = run_script_runs(server, tmp_path, JIT_LOAD, args=[str(BUILD / "tests/kernels/test_kernels.ptxonly.fatbin")])
    first, second = (json.loads(o["waited"]) for o in outs)
    assert first.get("cuModuleLoadData") == 1, first
    assert "cuModuleLoadData" not in second and "control:20" not in second, second
