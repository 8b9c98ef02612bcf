"""Order across client threads for one-way calls that create handles (server/handle_map.h
expect): the server runs each client thread's calls on its own worker, so a module loaded one-way
on one thread (the default; RGPU_ONEWAY_LOADS=0 makes loads wait) and used at once from another must still be loaded first.
The fake takes 300 ms per load here (RGPU_FAKE_LOAD_DELAY_MS), as a real driver takes
milliseconds; without the order, the other thread's lookup finds no module."""
import sys
import textwrap

from conftest import BUILD, IMAGE, SHIM_PREAMBLE, Server, run_client

SCRIPT = SHIM_PREAMBLE + textwrap.dedent(r"""
    img = open(sys.argv[1], "rb").read()
    for api in ("module", "library"):
        loaded = threading.Event()
        handle = ctypes.c_void_p()
        def loader():
            ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
            if api == "module":
                ok(cu.cuModuleLoadData(ctypes.byref(handle), img), "load")
            else:
                ok(cu.cuLibraryLoadData(ctypes.byref(handle), img, None, None, 0, None, None, 0), "library")
            loaded.set()
        t = threading.Thread(target=loader)
        t.start()
        loaded.wait()
        # This thread names the module at once: the server must not look it up before it is loaded.
        ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
        fn, kern = ctypes.c_void_p(), ctypes.c_void_p()
        if api == "module":
            ok(cu.cuModuleGetFunction(ctypes.byref(fn), handle, b"rgpu_vec_add"), "GetFunction")
        else:
            ok(cu.cuLibraryGetKernel(ctypes.byref(kern), handle, b"rgpu_vec_add"), "GetKernel")
            ok(cu.cuKernelGetFunction(ctypes.byref(fn), kern), "KernelGetFunction")
        a = ctypes.c_int()
        ok(cu.cuFuncGetAttribute(ctypes.byref(a), 4, fn), "FuncGetAttribute")  # waits: earlier errors come back
        ok(cu.cuCtxSynchronize(), "sync")
        t.join()
    print("cross-thread ok")
""")


def _run_with_slow_loads(tmp_path, monkeypatch, text, load_ms=300):
    """Runs a script through the shim against a fake server whose module loads take load_ms;
    returns the client's result and the server's log."""
    monkeypatch.setenv("RGPU_FAKE_LOAD_DELAY_MS", str(load_ms))
    server = Server()
    try:
        script = tmp_path / "script.py"
        script.write_text(text)
        r = run_client([sys.executable, str(script), IMAGE], server,
                       env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_ONEWAY_LOADS": "1"})
        assert r.returncode == 0, r.stdout + r.stderr
        return r, server.text()
    finally:
        server.stop()


def test_a_module_loaded_one_way_is_there_for_another_thread(tmp_path, monkeypatch):
    r, _ = _run_with_slow_loads(tmp_path, monkeypatch, SCRIPT)
    assert "cross-thread ok" in r.stdout


ORDER_SCRIPT = SHIM_PREAMBLE + textwrap.dedent(r"""
    ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
    d, s = ctypes.c_uint64(), ctypes.c_void_p()
    ok(cu.cuMemAlloc_v2(ctypes.byref(d), 4096), "alloc")
    ok(cu.cuStreamCreate(ctypes.byref(s), 0), "stream")
    img = open(sys.argv[1], "rb").read()
    filled, both = threading.Event(), threading.Event()
    def producer():
        # A slow one-way call (the server's load takes 300 ms), then a one-way fill of 1s.
        ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
        mod = ctypes.c_void_p()
        ok(cu.cuModuleLoadData(ctypes.byref(mod), img), "load")
        ok(cu.cuMemsetD32Async(d, 1, 1024, s), "fill 1")
        filled.set()
        both.wait()
        ok(cu.cuStreamSynchronize(s), "producer sync")  # answered once its fill has been enqueued
    t = threading.Thread(target=producer)
    t.start()
    filled.wait()
    # The producer's fill returned before this one was made: on a real driver it runs first.
    ok(cu.cuMemsetD32Async(d, 2, 1024, s), "fill 2")
    both.set()
    t.join()
    ok(cu.cuStreamSynchronize(s), "sync")
    out = (ctypes.c_uint32 * 1024)()
    ok(cu.cuMemcpyDtoH_v2(out, d, 4096), "read")
    print("values", sorted(set(out)))
""")


def test_one_way_calls_of_two_threads_reach_the_stream_in_the_order_they_were_made(tmp_path, monkeypatch):
    # PyTorch's backward launches from the autograd thread on the stream the main thread's
    # forward used; on the H200 the backward sometimes ran first (AdamW off by 1e-2 or NaN).
    r, _ = _run_with_slow_loads(tmp_path, monkeypatch, ORDER_SCRIPT)
    assert "values [2]" in r.stdout, r.stdout + r.stderr


STALL_SCRIPT = SHIM_PREAMBLE + textwrap.dedent(r"""
    import time
    img = open(sys.argv[1], "rb").read()
    started = threading.Event()
    def loader():
        ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
        mod = ctypes.c_void_p()
        ok(cu.cuModuleLoadData(ctypes.byref(mod), img), "load")  # one-way; 6 s in the driver
        started.set()
    t = threading.Thread(target=loader)
    t.start()
    started.wait()
    ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
    t0 = time.monotonic()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    ok(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "MemGetInfo")
    print(f"waited {time.monotonic() - t0:.2f} s")
    t.join()
""")


def test_a_call_stuck_in_the_driver_does_not_stall_other_threads_for_good(tmp_path, monkeypatch):
    # A one-way call that blocks in the driver (here a 6 s load) holds later calls of other
    # threads back only for the order wait (300 ms here, 10 s by default), then they run, logged.
    monkeypatch.setenv("RGPU_ORDER_WAIT_MS", "300")
    r, log = _run_with_slow_loads(tmp_path, monkeypatch, STALL_SCRIPT, load_ms=6000)
    waited = float(r.stdout.split("waited ")[1].split()[0])
    assert 0.25 < waited < 4.0, r.stdout
    assert "out of order" in log, log
