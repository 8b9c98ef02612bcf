"""Copies between devices of two rgpu-servers (RGPU_SERVER=a,b): cuMemcpyDtoD, cuMemcpyPeer and
their async forms go from server to server over a link the source dials, never through the
client. Checked byte-exact at odd sizes up to 64 MiB, both ways, and by the client's own byte
counts (RGPU_STATS): what it sent and received is what it uploaded and read back, not the copies."""
import contextlib
import json
import os
import time
from pathlib import Path

import pytest

from conftest import BUILD, IMAGE, SHIM_PREAMBLE, Server, run_client

MIB = 1 << 20
SIZES = [1, 12345, 16 * MIB + 3, 64 * MIB - 1]

# mem[0] on device 0 (server a), mem[1] on device 1 (server b): n bytes each (n set before), and
# their contexts ctx[0], ctx[1].
N_BYTES_ON_EACH = """u64 = ctypes.c_uint64
ctx, mem = [], []
for d in (0, 1):
    c, p = ctypes.c_void_p(), ctypes.c_uint64()
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), d), "retain")
    ok(cu.cuCtxSetCurrent(c), "set current")
    ok(cu.cuMemAlloc_v2(ctypes.byref(p), n), "alloc")
    ctx.append(c); mem.append(p.value)
"""


SCRIPT = """import ctypes, os, random, sys
cu = ctypes.CDLL(os.environ["SHIM"])
def ok(rc, what):
    if rc != 0:
        print(f"FAIL {what}: {rc}"); sys.stdout.flush(); os._exit(1)
sizes = [int(s) for s in sys.argv[1:]]
cap = max(sizes)
ok(cu.cuInit(0), "cuInit")
ctx, stream = [], []
for d in (0, 1):
    c, s = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), d), "retain")
    ok(cu.cuCtxSetCurrent(c), "set current")
    ok(cu.cuStreamCreate(ctypes.byref(s), 1), "stream")
    ctx.append(c); stream.append(s)
def alloc(d):
    ok(cu.cuCtxSetCurrent(ctx[d]), "set current")
    p = ctypes.c_uint64()
    ok(cu.cuMemAlloc_v2(ctypes.byref(p), cap), "alloc")
    return p.value
src_a, dst_b, back_a = alloc(0), alloc(1), alloc(0)
ok(cu.cuCtxSetCurrent(ctx[0]), "set current")
data = random.Random(7).randbytes(cap)
ok(cu.cuMemcpyHtoD_v2(ctypes.c_uint64(src_a), data, cap), "upload")
uploaded, read_back = cap, 0
def read(p, n):
    global read_back
    got = ctypes.create_string_buffer(n)
    ok(cu.cuMemcpyDtoH_v2(got, ctypes.c_uint64(p), n), "read back")
    read_back += n
    return got.raw
u64 = ctypes.c_uint64
for n in sizes:
    # a -> b, synchronous; then b -> a on a's stream (async), and a -> b with cuMemcpyPeerAsync on b's stream.
    ok(cu.cuMemsetD8_v2(u64(dst_b), 0, cap), "clear b")
    ok(cu.cuMemcpyDtoD_v2(u64(dst_b), u64(src_a), n), "dtod a->b")
    print("sync", n, read(dst_b, n) == data[:n])
    ok(cu.cuMemcpyDtoDAsync_v2(u64(back_a), u64(dst_b), n, stream[0]), "dtod async b->a")
    ok(cu.cuStreamSynchronize(stream[0]), "sync a's stream")
    print("async", n, read(back_a, n) == data[:n])
    ok(cu.cuMemsetD8_v2(u64(dst_b), 0, cap), "clear b")
    ok(cu.cuMemcpyPeerAsync(u64(dst_b), ctx[1], u64(src_a), ctx[0], n, stream[1]), "peer async a->b")
    ok(cu.cuStreamSynchronize(stream[1]), "sync b's stream")
    print("peer", n, read(dst_b, n) == data[:n])
# cuMemcpyPeer, a -> b, at an offset.
ok(cu.cuMemcpyPeer(u64(dst_b + 1), ctx[1], u64(src_a + 5), ctx[0], 4096), "peer")
print("peer offset", read(dst_b + 1, 4096) == data[5:4101])
print("uploaded", uploaded, "read_back", read_back)
print("DONE")
"""


@pytest.fixture(scope="module")
def two_servers():
    a = Server()
    b = Server(env={"RGPU_FAKE_ADDRESS_SLOT": "1"})
    yield a, b
    a.stop()
    b.stop()


def test_copies_between_servers_go_server_to_server_byte_exact(two_servers, tmp_path):
    a, b = two_servers
    script = tmp_path / "copy.py"
    script.write_text(SCRIPT)
    stats = tmp_path / "stats.json"
    r = run_client(["python3", str(script), *map(str, SIZES)], f"{a.addr},{b.addr}", timeout=300,
                   env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_STATS": str(stats)})
    assert "DONE" in r.stdout, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    for n in SIZES:
        for kind in ("sync", "async", "peer"):
            assert f"{kind} {n} True" in lines, r.stdout
    assert "peer offset True" in lines
    uploaded, read_back = (int(x) for x in lines[-2].split()[1::2])
    copied = sum(SIZES) * 3 + 4096
    s = json.load(open(stats))
    # The client's frames carry its uploads and read-backs and little else: the copies (~240 MiB)
    # never passed through it.
    assert s["bytes_sent"] - uploaded < MIB, (s, uploaded, copied)
    assert s["bytes_received"] - read_back < MIB, (s, read_back, copied)
    assert "copy link from server" in b.text() and "copy link from server" in a.text()


TORCH_SCRIPT = """import torch
print("count", torch.cuda.device_count())
gen = torch.Generator().manual_seed(3)
for n in [1, 12345, 16 * (1 << 20) + 3]:
    src = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen)
    a = src.to("cuda:0")
    b = a.to("cuda:1")
    torch.cuda.synchronize(1)
    print("to", n, b.device, torch.equal(b.cpu(), src))
    back = b.to("cuda:0", non_blocking=True)
    torch.cuda.synchronize(0)
    print("back", n, back.device, torch.equal(back.cpu(), src))
print("DONE")
"""


def test_torch_sees_both_servers_and_moves_tensors_between_them(two_servers, tmp_path):
    from test_torch import torch_python

    py = torch_python()
    a, b = two_servers
    script = tmp_path / "torch_two.py"
    script.write_text(TORCH_SCRIPT)
    stats = tmp_path / "stats.json"
    r = run_client([py, str(script)], f"{a.addr},{b.addr}", timeout=300, env_extra={"RGPU_STATS": str(stats)})
    assert "DONE" in r.stdout, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "count 2", r.stdout
    for n in (1, 12345, 16 * MIB + 3):
        assert f"to {n} cuda:1 True" in lines and f"back {n} cuda:0 True" in lines, r.stdout
    # Server to server (kOpPeerSend, kOpPeerReceive: one each per copy), not through the client.
    calls = json.load(open(stats))["calls"]
    assert calls.get("control:50") == 6 and calls.get("control:51") == 6, calls


ROUNDS_SCRIPT = """import ctypes, os, sys
cu = ctypes.CDLL(os.environ["SHIM"])
def ok(rc, what):
    if rc != 0:
        print(f"FAIL {what}: {rc}"); sys.stdout.flush(); os._exit(1)
ok(cu.cuInit(0), "cuInit")
n = 65537
""" + N_BYTES_ON_EACH + """good = 0
for r in range(int(sys.argv[1])):
    for d in (0, 1):
        data = bytes((i * 13 + r + d) % 256 for i in range(n))
        ok(cu.cuMemcpyHtoD_v2(u64(mem[d]), data, n), "htod")
        got = ctypes.create_string_buffer(n)
        ok(cu.cuMemcpyDtoH_v2(got, u64(mem[d]), n), "dtoh")
        good += got.raw == data
    # and server to server: the link between them does not go through the client's connections
    ok(cu.cuMemcpyDtoD_v2(u64(mem[1]), u64(mem[0]), n), "dtod")
    got = ctypes.create_string_buffer(n)
    ok(cu.cuMemcpyDtoH_v2(got, u64(mem[1]), n), "dtoh 1")
    good += got.raw == bytes((i * 13 + r) % 256 for i in range(n))
print("good", good)
"""


def test_one_server_reconnecting_while_the_other_works(tmp_path):
    """Issue 19 with issue 16: the connection to one of two servers is cut 3 times (rgpu-faultproxy)
    while the program works on both; each server's connection resumes on its own, and every
    round's bytes are right, copies between the servers included."""
    import shutil
    import tempfile
    from test_reconnect import Proxy

    runtime = tempfile.mkdtemp(prefix="rgpu-rt-")
    a = Server(extra_args=["--runtime-dir", runtime])
    b = Server(extra_args=["--runtime-dir", runtime], env={"RGPU_FAKE_ADDRESS_SLOT": "1"})
    # The proxy's readiness probe is its connection 1; the next 3 are cut.
    proxy = Proxy(b.addr, "--fault", "cut", "--after-bytes", "20000", "--after-bytes-max", "300000",
                  "--connections", "4", "--seed", "5")
    try:
        script = tmp_path / "rounds.py"
        script.write_text(ROUNDS_SCRIPT)
        rounds = 20
        r = run_client(["python3", str(script), str(rounds)], f"{a.addr},{proxy.addr}", timeout=120,
                       env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1")})
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"good {rounds * 3}" in r.stdout, r.stdout + r.stderr
        assert "reconnecting" in r.stderr, r.stderr
        assert "resumes session" in b.text() and "resumes session" not in a.text()
    finally:
        proxy.stop()
        a.stop()
        b.stop()
        shutil.rmtree(runtime, ignore_errors=True)


def test_copies_between_servers_run_tls_where_the_client_does(tmp_path):
    """A server whose client reaches it over TLS (b) takes links over TLS only: a dials it, checks
    its certificate against the fingerprint b gave the client inside the client's verified TLS
    connection, and presents the ticket inside TLS. Copies out of b into the plaintext a go over
    a plain link. Byte-exact both ways, and not through the client."""
    import shutil
    import tempfile
    from test_tls import fingerprint

    state = tempfile.mkdtemp(prefix="rgpu-tls-")
    a = Server()
    b = Server(extra_args=["--tls", "auto", "--state-dir", state, "--runtime-dir", state],
               env={"RGPU_FAKE_ADDRESS_SLOT": "1"})
    try:
        script = tmp_path / "copy.py"
        script.write_text(SCRIPT)
        sizes = [12345, 16 * MIB + 3]
        stats = tmp_path / "stats.json"
        r = run_client(["python3", str(script), *map(str, sizes)], f"{a.addr},tls://{b.addr}", timeout=120,
                       env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_STATS": str(stats),
                                  "RGPU_TLS_FINGERPRINT": fingerprint(b)})
        assert "DONE" in r.stdout, r.stdout + r.stderr
        lines = r.stdout.splitlines()
        for n in sizes:
            for kind in ("sync", "async", "peer"):
                assert f"{kind} {n} True" in lines, r.stdout
        assert "peer offset True" in lines
        assert "open (TLS)" in b.text(), b.text()  # a -> b
        assert "copy link from server" in a.text() and "open (TLS)" not in a.text()  # b -> a, plain
        uploaded, read_back = (int(x) for x in lines[-2].split()[1::2])
        s = json.load(open(stats))
        assert s["bytes_sent"] - uploaded < MIB, s
        assert s["bytes_received"] - read_back < MIB, s
    finally:
        a.stop()
        b.stop()
        shutil.rmtree(state, ignore_errors=True)



BREAK_SCRIPT = SHIM_PREAMBLE + """import random
n = 5 * (1 << 20) + 7  # two chunks on the link
u64 = ctypes.c_uint64
ctx, stream, mem = [], [], []
for d in (0, 1):
    c, s, p = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64()
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), d), "retain")
    ok(cu.cuCtxSetCurrent(c), "set current")
    ok(cu.cuStreamCreate(ctypes.byref(s), 1), "stream")
    ok(cu.cuMemAlloc_v2(ctypes.byref(p), n), "alloc")
    ctx.append(c); stream.append(s); mem.append(p.value)
uploaded = read_back = 0
for r in range(3):
    data = random.Random(r).randbytes(n)
    ok(cu.cuMemcpyHtoD_v2(u64(mem[0]), data, n), "upload")
    uploaded += n
    if r == 2:  # the async form: a one-way call to each server
        ok(cu.cuMemcpyPeerAsync(u64(mem[1]), ctx[1], u64(mem[0]), ctx[0], n, stream[1]), "peer async")
        ok(cu.cuStreamSynchronize(stream[1]), "sync b's stream")
    else:
        ok(cu.cuMemcpyDtoD_v2(u64(mem[1]), u64(mem[0]), n), "dtod")
    got = ctypes.create_string_buffer(n)
    ok(cu.cuMemcpyDtoH_v2(got, u64(mem[1]), n), "read back")
    read_back += n
    print("copy", r, got.raw == data, flush=True)
    sys.stdin.readline()  # the test breaks the link before the next copy
print("uploaded", uploaded, "read_back", read_back)
print("DONE", flush=True)
"""


def _descendants(pid):
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def _link_sockets(server, state="01"):
    """(pid, fd) of each established TCP connection the server's processes hold that is not a
    client's (whose local port is the server's): the copy links it accepted or dialled. With
    state "0A": its listening sockets but the server's own, where it takes copy links."""
    found = []
    for pid in _descendants(server.proc.pid):
        try:
            tcp = {}
            for table in ("tcp", "tcp6"):
                for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                    f = line.split()
                    tcp[f[9]] = (int(f[1].rsplit(":", 1)[1], 16), f[3])  # inode: (local port, state)
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                inode = target[len("socket:["):-1] if target.startswith("socket:[") else None
                if inode in tcp and tcp[inode][1] == state and tcp[inode][0] != server.port:
                    found.append((pid, int(fd.name)))
        except OSError:
            continue  # the process ended meanwhile
    return found


@contextlib.contextmanager
def _borrowed_socket(pid, fd):
    """A socket another process holds, lent to this one by pidfd_getfd (Linux 5.6): options read
    and a shutdown act on the socket itself; closing the copy leaves the owner's open."""
    import ctypes
    import socket

    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        mine = libc.syscall(438, pidfd, fd, 0)  # SYS_pidfd_getfd
        if mine < 0:
            pytest.skip(f"cannot take another process's socket (pidfd_getfd: {os.strerror(ctypes.get_errno())}); "
                        "this test needs Linux 5.6+ and ptrace rights over the server")
        with socket.socket(fileno=mine) as s:
            yield s
    finally:
        os.close(pidfd)


def _break_connection(pid, fd):
    """Shuts down a socket another process holds, as a dropped connection would end it for that
    process."""
    import socket

    with _borrowed_socket(pid, fd) as s:
        s.shutdown(socket.SHUT_RDWR)


def _start(script_text, tmp_path, a, b, env_extra=None):
    """The script as a client of a and b, its stdin and stdout pipes to talk to the test."""
    import subprocess

    script = tmp_path / "client.py"
    script.write_text(script_text)
    env = {**os.environ, "LD_LIBRARY_PATH": str(BUILD / "lib"), "RGPU_SERVER": f"{a.addr},{b.addr}",
           "SHIM": str(BUILD / "lib/libcuda.so.1"), **(env_extra or {})}
    env.pop("RGPU_TOKEN", None)
    return subprocess.Popen(["python3", str(script)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_broken_copy_link_is_dialled_again_by_the_next_copy(tmp_path):
    """The link a dialled to b is cut (b's end shut down, as when the connection drops) between
    copies, twice: each next copy, synchronous and async, finds the link closed, dials b again
    with the ticket it has, and arrives byte-exact, still not through the client."""
    # Servers of its own: b's processes hold this client's link and nothing else.
    a = Server()
    b = Server(env={"RGPU_FAKE_ADDRESS_SLOT": "1"})
    stats = tmp_path / "stats.json"
    opened = b.text().count("copy link from server")
    p = _start(BREAK_SCRIPT, tmp_path, a, b, {"RGPU_STATS": str(stats)})
    try:
        for r in range(3):
            line = p.stdout.readline()
            assert line == f"copy {r} True\n", line + p.stdout.read() + p.stderr.read()
            if r < 2:
                links = _link_sockets(b)
                assert len(links) == 1, links
                _break_connection(*links[0])
                closed = b.text().count("copy link from server") - opened
                deadline = time.time() + 5
                while b.text().count("copy link from server") - opened < closed + 1 and time.time() < deadline:
                    time.sleep(0.05)  # b's link thread saw the end: "copy link from server X closed"
            p.stdin.write("\n")
            p.stdin.flush()
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
        a_log = a.text()
        a.stop()
        b.stop()
    assert "DONE" in out, out + err
    uploaded, read_back = (int(x) for x in out.splitlines()[-2].split()[1::2])
    s = json.load(open(stats))
    assert s["bytes_sent"] - uploaded < MIB, s
    assert s["bytes_received"] - read_back < MIB, s
    assert a_log.count("dialling it again") == 2, a_log[-3000:]


def _socket_options(pid, fd):
    """(SO_KEEPALIVE, TCP_KEEPIDLE s, TCP_USER_TIMEOUT ms) of a socket another process holds."""
    import socket

    with _borrowed_socket(pid, fd) as s:
        return (s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                s.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT))


SOURCE_DIES_SCRIPT = SHIM_PREAMBLE + """n = 64 << 20  # 16 chunks on the link (4 MiB each), each read off a's device in 300 ms: 4.8 s
""" + N_BYTES_ON_EACH + """ok(cu.cuMemcpyDtoD_v2(u64(mem[1]), u64(mem[0]), 4096), "a first copy: the link is dialled")
print("copying", flush=True)
print("copy", cu.cuMemcpyDtoD_v2(u64(mem[1]), u64(mem[0]), n), flush=True)
"""


def test_a_copy_whose_source_session_dies_fails_at_once_on_the_destination(tmp_path):
    """a's session is killed while it is sending a copy to b (the fake's device-to-host copies are
    slowed so that the copy is under way): b's link from a ends, and b fails the copy's receive at
    once instead of waiting 60 s for bytes that cannot come. Both ends of the link watch it for a
    silent peer (keepalive after 15 s, TCP_USER_TIMEOUT 30 s)."""
    import signal

    a = Server(env={"RGPU_FAKE_DTOH_DELAY_MS": "300"})
    b = Server(env={"RGPU_FAKE_ADDRESS_SLOT": "1"})
    p = _start(SOURCE_DIES_SCRIPT, tmp_path, a, b)
    try:
        line = p.stdout.readline()
        assert line == "copying\n", line + p.stdout.read() + p.stderr.read()
        sent, taken = _link_sockets(a), _link_sockets(b)  # the link's two ends
        assert len(sent) == 1 and len(taken) == 1, (sent, taken)
        for end in sent + taken:
            assert _socket_options(*end) == (1, 15, 30000), end
        time.sleep(1.5)  # a few chunks sent (one even on a loaded machine), most still to come
        killed = time.time()
        os.kill(sent[0][0], signal.SIGKILL)  # a's session process, which holds the link
        deadline = killed + 30
        while "the link a copy from another server came on ended" not in b.text() and time.time() < deadline:
            time.sleep(0.05)
        took = time.time() - killed
        text = b.text()
        assert "the link a copy from another server came on ended after" in text, text[-3000:]
        assert "of its 67108864 bytes" in text and "did not come" not in text, text[-3000:]
        assert took < 20, took  # not b's 60 s wait
        out, err = p.communicate(timeout=60)
        assert out.startswith("copy ") and out != "copy 0\n", out + err  # the copy failed, the client said why
        assert "lost the session on rgpu-server at " + a.addr in err, err
        # b's session ended when the client left (it cannot go on without a), not with the copy.
        assert "left (the connection closed)" in b.text(), b.text()[-3000:]
    finally:
        p.kill()
        p.communicate()
        a.stop()
        b.stop()


LONG_STREAM_SCRIPT = SHIM_PREAMBLE + """import random
n = 5 * (1 << 20) + 7
""" + N_BYTES_ON_EACH + """ok(cu.cuCtxSetCurrent(ctx[0]), "set current")
data = random.Random(3).randbytes(n)
ok(cu.cuMemcpyHtoD_v2(u64(mem[0]), data, n), "upload")
s = ctypes.c_void_p(); ok(cu.cuStreamCreate(ctypes.byref(s), 1), "stream")
mod, spin = ctypes.c_void_p(), ctypes.c_void_p()
ok(cu.cuModuleLoadData(ctypes.byref(mod), open(os.environ["IMAGE"], "rb").read()), "load")
ok(cu.cuModuleGetFunction(ctypes.byref(spin), mod, b"rgpu_spin"), "function")
arg = ctypes.c_longlong(3000)  # a's stream is busy three times b's wait for an unnamed copy
params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
ok(cu.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, params, None), "spin")
ok(cu.cuMemcpyDtoDAsync_v2(u64(mem[1]), u64(mem[0]), n, s), "copy a->b behind the kernel")
ok(cu.cuStreamSynchronize(s), "sync a's stream")
ok(cu.cuCtxSetCurrent(ctx[1]), "set current")
got = ctypes.create_string_buffer(n)
rc = cu.cuMemcpyDtoH_v2(got, u64(mem[1]), n)
print("copied", rc, got.raw == data, flush=True)
"""


def test_a_copy_behind_long_work_on_its_source_stream_waits_for_it(tmp_path):
    """b gives a copy that a has not named 1 s (RGPU_PEER_COPY_WAIT_S here; 60 by default), but a
    names it on the link before it waits for its stream: a copy behind 3 s of work on a's stream
    arrives byte-exact instead of failing on b after 1 s."""
    a = Server()
    b = Server(env={"RGPU_FAKE_ADDRESS_SLOT": "1", "RGPU_PEER_COPY_WAIT_S": "1"})
    try:
        script = tmp_path / "long.py"
        script.write_text(LONG_STREAM_SCRIPT)
        r = run_client(["python3", str(script)], f"{a.addr},{b.addr}", timeout=120,
                       env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "IMAGE": str(IMAGE)})
        assert "copied 0 True" in r.stdout, r.stdout + r.stderr + b.text()[-3000:]
        assert "did not come" not in b.text(), b.text()[-3000:]
    finally:
        a.stop()
        b.stop()


CANCEL_SCRIPT = SHIM_PREAMBLE + """import time
n = 1 << 20
""" + N_BYTES_ON_EACH + """ok(cu.cuMemcpyDtoD_v2(u64(mem[1]), u64(mem[0]), n), "a first copy: the ticket, the link")
print("linked", flush=True)
sys.stdin.readline()  # the test closes the link and b's listener
t = time.time()
rc = cu.cuMemcpyDtoD_v2(u64(mem[1]), u64(mem[0]), n)
print("copy", rc, round(time.time() - t, 1), flush=True)
ok(cu.cuMemsetD8_v2(u64(mem[1]), 7, n), "b still serves this thread")
print("DONE", flush=True)
"""


def test_a_copy_whose_source_cannot_dial_the_destination_fails_at_once(tmp_path):
    """a cannot dial b (b's link and its link listener are shut down between two copies): a answers
    the copy with what to check, and the client tells b (kOpPeerCancel), whose receive ends then
    instead of after 60 s; b goes on serving the same client thread."""
    a = Server()
    b = Server(env={"RGPU_FAKE_ADDRESS_SLOT": "1"})
    p = _start(CANCEL_SCRIPT, tmp_path, a, b)
    try:
        line = p.stdout.readline()
        assert line == "linked\n", line + p.stdout.read() + p.stderr.read()
        links, listeners = _link_sockets(b), _link_sockets(b, "0A")
        assert len(links) == 1 and len(listeners) == 1, (links, listeners)
        _break_connection(*listeners[0])  # refuses connections from now on
        _break_connection(*links[0])
        deadline = time.time() + 10
        while "closed" not in b.text().split("copy link from server")[-1] and time.time() < deadline:
            time.sleep(0.05)  # b's link thread saw the end: a sees it hung up
        p.stdin.write("\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
        a.stop()
        b.stop()
    assert "DONE" in out, out + err
    copy = next(l for l in out.splitlines() if l.startswith("copy "))
    rc, took = int(copy.split()[1]), float(copy.split()[2])
    assert rc != 0 and took < 10, out  # not b's 60 s
    assert "could not dial its copy link" in err, err
