"""Several rgpu-servers under one program (RGPU_SERVER=a,b): the GPUs of `a` then `b` as one
device list (CUDA_VISIBLE_DEVICES applied to it), every call routed to the server of the handles
it names (contexts, streams, events, modules, functions, memory), a call that names handles of
two servers refused with a message that says so, and a malformed list refused with the form a
list takes. Two fake servers: `a` with two GPUs, `b` with one, at other addresses and UUIDs
(RGPU_FAKE_ADDRESS_SLOT=1), as another host's."""
import pytest

from conftest import BUILD, IMAGE, SHIM_PREAMBLE, Server, run_client

SCRIPT = """import ctypes, os, sys
cu = ctypes.CDLL(os.environ["SHIM"])
def ok(rc, what):
    if rc != 0:
        print(f"FAIL {what}: {rc}"); sys.stdout.flush(); os._exit(1)
ok(cu.cuInit(0), "cuInit")
n = ctypes.c_int()
ok(cu.cuDeviceGetCount(ctypes.byref(n)), "count")
print("count", n.value)
image = open(os.environ["IMAGE"], "rb").read()
ctx, mem, streams, events, funcs = [], [], [], [], []
for d in range(n.value):
    u = (ctypes.c_ubyte * 16)()
    ok(cu.cuDeviceGetUuid(u, d), "uuid")
    print("device", d, "uuid", bytes(u)[14:].hex())
    c = ctypes.c_void_p()
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), d), "retain")
    ok(cu.cuCtxSetCurrent(c), "set current")
    dev = ctypes.c_int(-1)
    ok(cu.cuCtxGetDevice(ctypes.byref(dev)), "ctx device")
    assert dev.value == d, (dev.value, d)
    p = ctypes.c_uint64()
    ok(cu.cuMemAlloc_v2(ctypes.byref(p), 4099), "alloc")
    data = bytes((i * 7 + d) % 251 for i in range(4099))
    ok(cu.cuMemcpyHtoD_v2(p, data, 4099), "htod")
    s, e = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuStreamCreate(ctypes.byref(s), 1), "stream")
    ok(cu.cuEventCreate(ctypes.byref(e), 0), "event")
    ok(cu.cuMemsetD8Async(ctypes.c_uint64(p.value + 4096), 0x5a, 3, s), "memset async")
    ok(cu.cuEventRecord(e, s), "record")
    ok(cu.cuEventSynchronize(e), "event sync")
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuModuleLoadData(ctypes.byref(mod), image), "module")
    ok(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"rgpu_vec_add"), "function")
    attr = ctypes.c_int()
    ok(cu.cuFuncGetAttribute(ctypes.byref(attr), 0, fn), "function attribute")
    ctx.append(c); mem.append(p); streams.append(s); events.append(e); funcs.append(fn)
    print("ctx", d, "server", (c.value >> 54) & 0xff, "stream", (s.value >> 54) & 0xff, "module", (mod.value >> 54) & 0xff)
# With device 0's context current, calls that name only another device's pointer, stream or event
# go to that device's server.
ok(cu.cuCtxSetCurrent(ctx[0]), "set current 0")
for d in range(n.value):
    got = ctypes.create_string_buffer(4099)
    ok(cu.cuMemcpyDtoH_v2(got, mem[d], 4099), f"dtoh {d}")
    want = bytes((i * 7 + d) % 251 for i in range(4096)) + b"\\x5a" * 3
    print("bytes", d, got.raw == want)
    ok(cu.cuStreamSynchronize(streams[d]), f"stream sync {d}")
    ok(cu.cuEventQuery(events[d]), f"event query {d}")
can = ctypes.c_int(-1)
for a in range(n.value):
    for b in range(n.value):
        ok(cu.cuDeviceCanAccessPeer(ctypes.byref(can), a, b), "can access peer")
        print("peer", a, b, can.value)
last = n.value - 1
print("enable", cu.cuCtxEnablePeerAccess(ctx[last], 0))
# A stream of one server waiting for an event of the other: the client waits for the event
# (a host wait), after which the event has completed.
ok(cu.cuCtxSetCurrent(ctx[0]), "set current 0")
ok(cu.cuMemsetD8Async(ctypes.c_uint64(mem[0].value), 0x11, 4099, streams[0]), "memset async 0")
ok(cu.cuEventRecord(events[0], streams[0]), "record 0")
print("wait across servers", cu.cuStreamWaitEvent(streams[last], events[0], 0), cu.cuEventQuery(events[0]))
# Mixed: an event of the first server recorded on a stream of the last; one server's function
# launched on the other's stream.
print("mixed record", cu.cuEventRecord(events[0], streams[last]))
x = ctypes.c_uint64(mem[0].value)
k = ctypes.c_int(1)
params = (ctypes.c_void_p * 4)(ctypes.addressof(x), ctypes.addressof(x), ctypes.addressof(x), ctypes.addressof(k))
print("mixed launch", cu.cuLaunchKernel(funcs[0], 1, 1, 1, 1, 1, 1, 0, streams[last], params, None))
for d in range(n.value):
    ok(cu.cuMemFree_v2(mem[d]), f"free {d}")
print("DONE")
"""


@pytest.fixture(scope="module")
def two_servers():
    a = Server(env={"RGPU_FAKE_DEVICES": "2"})
    b = Server(env={"RGPU_FAKE_ADDRESS_SLOT": "1"})
    yield a, b
    a.stop()
    b.stop()


def run(tmp_path, servers, env=None):
    script = tmp_path / "multi_server.py"
    script.write_text(SCRIPT)
    return run_client(["python3", str(script)], servers,
                      env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "IMAGE": IMAGE, **(env or {})})


def test_two_servers_are_one_device_list_and_calls_go_where_their_handles_live(two_servers, tmp_path):
    a, b = two_servers
    r = run(tmp_path, f"{a.addr},{b.addr}")
    assert "DONE" in r.stdout, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "count 3"
    # a's two GPUs (UUIDs ..0001, ..0002), then b's (..0101).
    devices = [line for line in lines if line.startswith("device ")]
    assert devices == ["device 0 uuid 0001", "device 1 uuid 0002", "device 2 uuid 0101"], r.stdout
    for d, server in ((0, 0), (1, 0), (2, 1)):
        assert f"ctx {d} server {server} stream {server} module {server}" in lines, r.stdout
        assert f"bytes {d} True" in lines, r.stdout
    # Devices of one server are peers (the fake's NVLink); of two servers, never.
    assert "peer 0 1 1" in lines and "peer 1 0 1" in lines
    assert "peer 0 2 0" in lines and "peer 2 1 0" in lines
    assert "enable 217" in lines  # CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
    # Calls naming handles of both servers are refused, and say so.
    assert "mixed record 801" in lines and "mixed launch 801" in lines
    assert "wait across servers 0 0" in lines, r.stdout
    assert "cuEventRecord names handles of two servers" in r.stderr
    assert a.addr in r.stderr and b.addr in r.stderr
    # Each server served a session of this program.
    assert "prog=python3" in a.text() and "prog=python3" in b.text()


def test_cuda_visible_devices_orders_the_joined_list(two_servers, tmp_path):
    a, b = two_servers
    r = run(tmp_path, f"{a.addr},{b.addr}", env={"CUDA_VISIBLE_DEVICES": "2,0"})
    assert "DONE" in r.stdout, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    devices = [line for line in lines if line.startswith("device ")]
    assert lines[0] == "count 2" and devices == ["device 0 uuid 0101", "device 1 uuid 0001"], r.stdout
    assert "ctx 0 server 1 stream 1 module 1" in lines and "ctx 1 server 0 stream 0 module 0" in lines


@pytest.mark.parametrize("bad", ["127.0.0.1:1,", ",127.0.0.1:1", "127.0.0.1:1,,127.0.0.1:2", "127.0.0.1:1,ftp://x:2"])
def test_a_malformed_server_list_is_refused_with_the_form_it_takes(tmp_path, bad):
    r = run(tmp_path, bad)
    assert "FAIL cuInit: 46" in r.stdout, r.stdout + r.stderr  # CUDA_ERROR_DEVICE_UNAVAILABLE
    assert "host:port[,host:port...]" in r.stderr, r.stderr


def test_memory_at_an_address_another_server_uses_is_refused_saying_why(tmp_path):
    # Two servers whose device addresses coincide (both fakes at the same slot; on real GPUs each
    # server is a process of its own whose addresses can match the other's): the second device's
    # allocation lands where the first's is, and a pointer could not say which server it is on.
    # It is refused (and freed on its own server), not routed to the wrong GPU.
    a, b = Server(), Server()
    try:
        r = run(tmp_path, f"{a.addr},{b.addr}")
    finally:
        a.stop()
        b.stop()
    assert "count 2" in r.stdout and "FAIL alloc: 801" in r.stdout, r.stdout + r.stderr
    assert "cuMemAlloc:" in r.stderr and "refuses the allocation" in r.stderr, r.stderr
    assert a.addr in r.stderr and b.addr in r.stderr, r.stderr


def test_nvml_shim_lists_every_servers_gpus_as_one_list(two_servers, tmp_path):
    from test_multi_gpu import NVML_P2P, NVML_SHIM, UUID_PREFIX

    a, b = two_servers
    script = tmp_path / "nvml_p2p.py"
    script.write_text(NVML_P2P)
    r = run_client(["python3", str(script)], f"{a.addr},{b.addr}", env_extra={"NVML": NVML_SHIM})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "count 3" in lines, r.stdout
    # a's GPUs then b's (its UUIDs' 15th byte is its address slot, 1), indexed in the joined list.
    assert f"gpu 0 0 {UUID_PREFIX}01" in lines and f"gpu 1 1 {UUID_PREFIX}02" in lines, r.stdout
    assert f"gpu 2 2 {UUID_PREFIX[:-2]}0101" in lines, r.stdout
    assert "p2p 0 1 0 0" in lines and "p2p 1 0 0 0" in lines, r.stdout
    # GPUs of two servers: a call naming both is refused (NVML_ERROR_NOT_SUPPORTED).
    assert "p2p 0 2 3 -1" in lines and "p2p 2 1 3 -1" in lines, r.stdout


# Memory from the other allocators (stream-ordered, from a pool, pitched, a VMM reservation) is
# recorded with its server as cuMemAlloc's is: with the first server's context current, calls
# that name only such a pointer (cuMemsetD8, cuMemcpyDtoH, cuMemAddressFree) reach the second
# server, where the memory is. Unrecorded, they went to the first server, which has no such
# address (CUDA_ERROR_INVALID_VALUE).
ALLOCATORS = SHIM_PREAMBLE + """ctx_b = ctypes.c_void_p()  # device 2's, on server b; ctx is device 0's, on a
ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx_b), 2), "retain b")
ok(cu.cuCtxSetCurrent(ctx_b), "set current b")
s = ctypes.c_void_p()
ok(cu.cuStreamCreate(ctypes.byref(s), 1), "stream")
pool = ctypes.c_void_p()
ok(cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), 2), "default pool")
p_async, p_pool, p_pitch, p_va = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
pitch = ctypes.c_size_t()
ok(cu.cuMemAllocAsync(ctypes.byref(p_async), ctypes.c_size_t(4099), s), "alloc async")
ok(cu.cuMemAllocFromPoolAsync(ctypes.byref(p_pool), ctypes.c_size_t(4099), pool, s), "alloc from pool")
ok(cu.cuStreamSynchronize(s), "sync")
ok(cu.cuMemAllocPitch_v2(ctypes.byref(p_pitch), ctypes.byref(pitch), ctypes.c_size_t(1000), ctypes.c_size_t(5), 4), "alloc pitch")
ok(cu.cuMemAddressReserve(ctypes.byref(p_va), ctypes.c_size_t(2 << 20), ctypes.c_size_t(0), ctypes.c_uint64(0), ctypes.c_ulonglong(0)), "reserve")
ok(cu.cuCtxSetCurrent(ctx), "set current a")
for name, p in (("async", p_async), ("pool", p_pool), ("pitch", p_pitch)):
    rc = cu.cuMemsetD8_v2(p, 0x3c, ctypes.c_size_t(4099 if name != "pitch" else 1000))
    got = ctypes.create_string_buffer(1000)
    rc2 = cu.cuMemcpyDtoH_v2(got, p, ctypes.c_size_t(1000))
    print(name, rc, rc2, got.raw == b"\\x3c" * 1000)
print("address free", cu.cuMemAddressFree(p_va, ctypes.c_size_t(2 << 20)))
ok(cu.cuMemFreeAsync(p_async, s), "free async")
ok(cu.cuMemFreeAsync(p_pool, s), "free pool")
ok(cu.cuMemFree_v2(p_pitch), "free pitch")
ok(cu.cuStreamSynchronize(s), "sync again")
print("DONE")
"""


def test_memory_of_every_allocator_routes_to_its_server(two_servers, tmp_path):
    a, b = two_servers
    script = tmp_path / "allocators.py"
    script.write_text(ALLOCATORS)
    r = run_client(["python3", str(script)], f"{a.addr},{b.addr}",
                   env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1")})
    assert "DONE" in r.stdout, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    for name in ("async", "pool", "pitch"):
        assert f"{name} 0 0 True" in lines, r.stdout
    assert "address free 0" in lines, r.stdout


HOST_SIDE = SHIM_PREAMBLE + """n = ctypes.c_int(); ok(cu.cuDeviceGetCount(ctypes.byref(n)), "count")
FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
SCB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
hits = {}
host_fn = FN(lambda u: hits.__setitem__(u, hits.get(u, 0) + 1))
stream_fn = SCB(lambda s, status, u: hits.__setitem__(u, hits.get(u, 0) + 1))
ctx, mapped, devptr = [], [], []
cu.cuMemAllocManaged.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_uint]
for d in range(n.value):
    c = ctypes.c_void_p(); ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), d), "retain"); ok(cu.cuCtxSetCurrent(c), "current")
    s = ctypes.c_void_p(); ok(cu.cuStreamCreate(ctypes.byref(s), 1), "stream")
    # Host callbacks on this device's stream, and a graph host node launched twice.
    ok(cu.cuLaunchHostFunc(s, host_fn, ctypes.c_void_p(100 + d)), "launch host func")
    ok(cu.cuStreamAddCallback(s, stream_fn, ctypes.c_void_p(200 + d), 0), "stream callback")
    ok(cu.cuStreamBeginCapture_v2(s, 0), "begin capture")
    ok(cu.cuLaunchHostFunc(s, host_fn, ctypes.c_void_p(300 + d)), "captured host func")
    g, e = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuStreamEndCapture(s, ctypes.byref(g)), "end capture")
    ok(cu.cuGraphInstantiateWithFlags(ctypes.byref(e), g, ctypes.c_ulonglong(0)), "instantiate")
    ok(cu.cuGraphLaunch(e, s), "graph launch 1"); ok(cu.cuGraphLaunch(e, s), "graph launch 2")
    ok(cu.cuStreamSynchronize(s), "stream sync")
    print("callbacks", d, hits.get(100 + d), hits.get(200 + d), hits.get(300 + d))
    # Mapped host memory: written here, read by this device; written by this device, seen here.
    p = ctypes.c_void_p(); ok(cu.cuMemHostAlloc(ctypes.byref(p), 8192, 2), "host alloc")
    want = bytes((i + 17 * d) % 251 for i in range(8000))
    ctypes.memmove(p, want, 8000)
    dp = ctypes.c_uint64(); ok(cu.cuMemHostGetDevicePointer_v2(ctypes.byref(dp), p, 0), "device pointer")
    m = ctypes.c_uint64(); ok(cu.cuMemAlloc_v2(ctypes.byref(m), 8000), "alloc")
    ok(cu.cuMemcpyDtoD_v2(m, dp, 8000), "dtod")
    got = ctypes.create_string_buffer(8000); ok(cu.cuMemcpyDtoH_v2(got, m, 8000), "dtoh")
    ok(cu.cuMemsetD8_v2(dp, 0x40 + d, 100), "memset mapped")
    ok(cu.cuCtxSynchronize(), "ctx sync")
    print("mapped", d, got.raw == want, ctypes.string_at(p, 100) == bytes([0x40 + d]) * 100)
    # Managed memory.
    # (Two servers' drivers may place managed memory at one address, which this process can map
    # once: the second is then refused saying so.)
    mm = ctypes.c_uint64()
    rc = cu.cuMemAllocManaged(ctypes.byref(mm), 4096, 1)
    if rc == 801:
        print("managed", d, "refused")
    else:
        ok(rc, "managed")
        ok(cu.cuMemsetD8_v2(mm, 0x50 + d, 4096), "memset managed"); ok(cu.cuCtxSynchronize(), "ctx sync 2")
        print("managed", d, ctypes.string_at(mm.value, 4096) == bytes([0x50 + d]) * 4096)
    ctx.append(c); mapped.append(p); devptr.append(dp)
# With device 0 current, a call naming only the last device's mapped memory goes to its server.
ok(cu.cuCtxSetCurrent(ctx[0]), "current 0")
last = n.value - 1
ctypes.memset(mapped[last], 0, 8192)
ok(cu.cuMemsetD8_v2(devptr[last], 0x7e, 64), "memset last from 0")
ok(cu.cuCtxSetCurrent(ctx[last]), "current last"); ok(cu.cuCtxSynchronize(), "sync last")
print("routed", ctypes.string_at(mapped[last], 64) == b"\\x7e" * 64, ctypes.string_at(mapped[0], 100) == bytes([0x40]) * 100)
for p in mapped: ok(cu.cuMemFreeHost(p), "free host")
print("DONE")
"""


def test_host_callbacks_mapped_and_managed_memory_work_on_every_server(two_servers, tmp_path):
    # The host side of a GPU on a server after the first: host callbacks (cuLaunchHostFunc,
    # cuStreamAddCallback, a graph's host node) used to hang the stream (the callback was announced
    # on the first server's connection), and mapped host memory lost the session (its copy was
    # made on the second server, its updates taken on the first's connection). Each range is the
    # server's of the context current when it was made; a call naming only its device pointer goes
    # there whatever context is current.
    a, b = two_servers
    script = tmp_path / "host_side.py"
    script.write_text(HOST_SIDE)
    r = run_client(["python3", str(script)], f"{a.addr},{b.addr}",
                   env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1")}, timeout=60)
    assert "DONE" in r.stdout, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    for d in range(3):
        assert f"callbacks {d} 1 1 2" in lines, r.stdout
        assert f"mapped {d} True True" in lines, r.stdout
        assert f"managed {d} True" in lines, r.stdout
    assert "routed True True" in lines, r.stdout


ASYNC_ACROSS = SHIM_PREAMBLE + r"""import time
ctx_b = ctypes.c_void_p()  # device 2's, on server b; ctx is device 0's, on a
ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx_b), 2), "retain b")
ok(cu.cuCtxSetCurrent(ctx_b), "current b")
mod, spin = ctypes.c_void_p(), ctypes.c_void_p()
ok(cu.cuModuleLoadData(ctypes.byref(mod), open(os.environ["IMAGE"], "rb").read()), "load")
ok(cu.cuModuleGetFunction(ctypes.byref(spin), mod, b"rgpu_spin"), "function")
s = ctypes.c_void_p(); ok(cu.cuStreamCreate(ctypes.byref(s), 1), "stream")
p = ctypes.c_uint64(); ok(cu.cuMemAlloc_v2(ctypes.byref(p), 4096), "alloc")
ok(cu.cuMemsetD8_v2(p, 0x21, 4096), "memset")
arg = ctypes.c_longlong(5000)
params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
ok(cu.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, params, None), "spin")
buf = ctypes.create_string_buffer(4096)  # pageable: the bytes come as a delivery of their own
ok(cu.cuMemcpyDtoHAsync_v2(buf, p, 4096, s), "async copy")
ok(cu.cuCtxSetCurrent(ctx), "current a")
t = time.time()
print("sync a", cu.cuCtxSynchronize(), time.time() - t < 3); sys.stdout.flush()  # not b's 5 s
ok(cu.cuStreamSynchronize(s), "sync b")
print("landed", buf.raw == b"!" * 4096)
print("DONE")
"""


def test_a_synchronize_waits_only_for_its_own_servers_async_copies(two_servers, tmp_path):
    # A synchronize on server a used to wait for an async device-to-host copy still running on
    # server b, whose connection nobody reads meanwhile: for ever.
    a, b = two_servers
    script = tmp_path / "async_across.py"
    script.write_text(ASYNC_ACROSS)
    r = run_client(["python3", str(script)], f"{a.addr},{b.addr}",
                   env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "IMAGE": IMAGE}, timeout=60)
    assert "DONE" in r.stdout, r.stdout + r.stderr
    assert "sync a 0 True" in r.stdout.splitlines(), r.stdout
    assert "landed True" in r.stdout.splitlines(), r.stdout
