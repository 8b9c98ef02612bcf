"""Synchronizes that follow only work the program cannot observe go one-way
(client/device_work.h): PyTorch's model.to("cuda") is a copy and a synchronize per tensor, each a
round trip before. A synchronize after a launch, a device-to-host copy or work on another stream
still waits. Drives the shim with ctypes; RGPU_STATS counts what waited."""
import json
import textwrap

from conftest import BUILD, IMAGE, SHIM_PREAMBLE, run_client

SCRIPT = SHIM_PREAMBLE + textwrap.dedent(r"""
    import json
    N = 1 << 20
    dev = ctypes.c_uint64()
    ok(cu.cuMemAlloc_v2(ctypes.byref(dev), N * 4), "alloc")
    host = (ctypes.c_uint32 * N)(*range(N))
    back = (ctypes.c_uint32 * N)()
    def stats():
        ok(cu.rgpu_stats_write(), "stats")
        s = json.load(open(os.environ["RGPU_STATS"]))
        return {o["op"]: o["waited"] for o in s["ops"] + s["oneway_ops"]}
    def waits(name):
        return stats().get(name, 0)
    # Copies to the device, each followed by a synchronize: none waits.
    for _ in range(10):
        ok(cu.cuMemcpyHtoDAsync_v2(dev, host, N * 4, None), "HtoD")
        ok(cu.cuStreamSynchronize(None), "sync after HtoD")
    ok(cu.cuCtxSynchronize(), "ctx sync after copies")
    print("after copies:", waits("cuStreamSynchronize"), waits("cuCtxSynchronize"))
    # A memset is not checked on the client: the synchronize after it waits to hear how it went.
    ok(cu.cuMemsetD8Async(dev, 0, 16, None), "memset")
    ok(cu.cuCtxSynchronize(), "ctx sync after memset")
    print("after memset:", waits("cuCtxSynchronize"))
    # What the copies wrote is there (the server ran them, and the synchronizes, in order).
    ok(cu.cuMemcpyDtoH_v2(back, dev, N * 4), "DtoH")
    print("data:", list(back[16:20]), back[N - 1])
    # A launch makes the next synchronize wait; after it, copies are invisible again.
    img = open(sys.argv[1], "rb").read()
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuModuleLoadData(ctypes.byref(mod), img), "load")
    ok(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"rgpu_fill_u32"), "function")
    p, v, n = ctypes.c_uint64(dev.value), ctypes.c_uint32(7), ctypes.c_uint64(N)
    params = (ctypes.c_void_p * 3)(ctypes.addressof(p), ctypes.addressof(v), ctypes.addressof(n))
    def launch(stream):
        ok(cu.cuLaunchKernel(fn, N // 256, 1, 1, 256, 1, 1, 0, stream, params, None), "launch")
    launch(None)
    ok(cu.cuStreamSynchronize(None), "sync after launch")
    ok(cu.cuMemcpyHtoDAsync_v2(dev, host, 64, None), "HtoD")
    ok(cu.cuStreamSynchronize(None), "sync after HtoD")
    print("after launch:", waits("cuStreamSynchronize"))
    # Work on another stream: every synchronize waits until one covering that stream has.
    s2 = ctypes.c_void_p()
    ok(cu.cuStreamCreate(ctypes.byref(s2), 1), "stream")  # CU_STREAM_NON_BLOCKING
    launch(s2)
    ok(cu.cuStreamSynchronize(None), "sync 0 with s2 busy")
    ok(cu.cuStreamSynchronize(None), "sync 0 with s2 busy again")
    ok(cu.cuStreamSynchronize(s2), "sync s2")
    ok(cu.cuStreamSynchronize(None), "sync 0 after s2")
    print("after s2:", waits("cuStreamSynchronize"))
    # Another thread's launches: this thread's synchronize waits for them (this thread itself
    # sent nothing unchecked), each time that thread launches again after a synchronize.
    import queue
    jobs, done = queue.Queue(), queue.Queue()
    def worker():
        ok(cu.cuCtxSetCurrent(ctx), "worker SetCurrent")
        while jobs.get():
            launch(None)
            done.put(True)
    t = threading.Thread(target=worker)
    t.start()
    for _ in range(2):
        jobs.put(True)
        done.get()
        ok(cu.cuStreamSynchronize(None), "sync after the other thread's launch")
    jobs.put(False)
    t.join()
    print("after again:", waits("cuStreamSynchronize"))
    ok(cu.cuMemcpyDtoH_v2(back, dev, N * 4), "DtoH")
    print("data:", back[0], back[16], back[N - 1])
    # A copy the client cannot vouch for (not into memory it allocated) makes the synchronize
    # wait, so the synchronize reports its failure as a local driver's would.
    bad = cu.cuMemcpyHtoDAsync_v2(ctypes.c_uint64(0x10), host, 64, None)
    sync_rc = cu.cuStreamSynchronize(None)
    probe = ctypes.c_uint64()
    next_rc = cu.cuMemAlloc_v2(ctypes.byref(probe), 64)
    print("error:", bad, sync_rc, next_rc)
""")


def run(server, tmp_path, **env):
    stats = tmp_path / "stats.json"
    r = run_client(["python3", "-c", SCRIPT, IMAGE], server,
                   env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_STATS": str(stats), **env})
    assert r.returncode == 0, r.stdout + r.stderr
    return dict(line.split(": ", 1) for line in r.stdout.splitlines())


def test_synchronize_after_copies_only_does_not_wait(server, tmp_path):
    out = run(server, tmp_path)
    assert out["after copies"] == "0 0"
    assert out["after memset"] == "1"
    assert out["after launch"] == "1"         # the synchronize after the launch
    assert out["after s2"] == "4"             # two with s2 busy, s2's own; then none
    assert out["after again"] == "6"
    assert out["data"] == "7 7 7"             # the launch ran after the copies, the 64 bytes before it
    bad, sync_rc, next_rc = out["error"].split()
    assert bad == "0" and sync_rc != "0" and next_rc == "0", out["error"]


def test_oneway_sync_off_makes_every_synchronize_wait(server, tmp_path):
    out = run(server, tmp_path, RGPU_ONEWAY_SYNC="0")
    assert out["after copies"] == "10 1"
    bad, sync_rc, next_rc = out["error"].split()
    assert sync_rc != "0" and next_rc == "0", out["error"]



TWO_DEVICES = SHIM_PREAMBLE + textwrap.dedent(r"""
    import json
    def waits(name):
        ok(cu.rgpu_stats_write(), "stats")
        st = json.load(open(os.environ["RGPU_STATS"]))
        return {o["op"]: o["waited"] for o in st["ops"] + st["oneway_ops"]}.get(name, 0)
    ctx1 = ctypes.c_void_p()
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx1), 1), "retain 1")
    ok(cu.cuCtxSetCurrent(ctx1), "current 1")
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuModuleLoadData(ctypes.byref(mod), open(sys.argv[1], "rb").read()), "load")
    ok(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"rgpu_fill_u32"), "function")
    s1, dev = ctypes.c_void_p(), ctypes.c_uint64()
    ok(cu.cuStreamCreate(ctypes.byref(s1), 1), "stream")
    ok(cu.cuMemAlloc_v2(ctypes.byref(dev), 4096), "alloc")
    p, v, n = ctypes.c_uint64(dev.value), ctypes.c_uint32(7), ctypes.c_uint64(1024)
    params = (ctypes.c_void_p * 3)(ctypes.addressof(p), ctypes.addressof(v), ctypes.addressof(n))
    ok(cu.cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, s1, params, None), "launch on device 1")
    ok(cu.cuCtxSetCurrent(ctx), "current 0")
    ok(cu.cuCtxSynchronize(), "sync device 0")  # covers device 0's work, not device 1's
    before = waits("cuStreamSynchronize")
    ok(cu.cuCtxSetCurrent(ctx1), "current 1 again")
    ok(cu.cuStreamSynchronize(s1), "sync s1")
    print("s1 waited:", waits("cuStreamSynchronize") - before)
    ok(cu.cuStreamSynchronize(s1), "sync s1 again")
    print("again waited:", waits("cuStreamSynchronize") - before)
""")


def test_a_context_synchronize_leaves_another_devices_streams_busy(tmp_path):
    # A context synchronize marked every stream idle, so that a later synchronize of another
    # device's stream, with a launch on it, went one-way: it returned before the launch had run.
    from conftest import Server
    s = Server(env={"RGPU_FAKE_DEVICES": "2"})
    try:
        r = run_client(["python3", "-c", TWO_DEVICES, IMAGE], s,
                       env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_STATS": str(tmp_path / "stats.json")},
                       timeout=60)
    finally:
        s.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    out = dict(line.split(": ", 1) for line in r.stdout.splitlines())
    assert out["s1 waited"] == "1", r.stdout  # the launch on s1 is covered by this synchronize only
    assert out["again waited"] == "1", r.stdout  # after it, s1 is idle
