"""rgpu-smi suspend | resume | migrate (issue 16, item 8) on the fake driver: a driver-API program
(reconnect_test, paused after its first round) is suspended through the server, makes no progress
while suspended, and finishes byte for byte as an untouched run does once resumed or moved to
fake GPU 1; the client sees only a pause (no reconnect, heartbeats answered through a suspension
longer than three heartbeat intervals); wrong transitions and unknown sessions get clear errors; a
token-protected server refuses rgpu-smi without the token. Every wait is bounded. What the fake
cannot show (the real driver's calls, the GPU's memory freed and restored, two real GPUs) is
listed in docs/architecture.md ("Suspend, resume, migrate")."""
import os
import re
import subprocess
import time

import struct

import textwrap

import pytest

import rgpu_wire as wire
from conftest import BUILD, IMAGE, SHIM_PREAMBLE, Server, run_client

PROGRAM = str(BUILD / "bin/reconnect_test")
RGPU_SMI = str(BUILD / "bin/rgpu-smi")
ROUNDS = "3"
HEARTBEAT = {"RGPU_HEARTBEAT": "1"}


def smi(server, *args, token=None):
    return run_client([RGPU_SMI, *args], server, token=token, env_extra=HEARTBEAT, timeout=60)


def session_rows(server, token=None):
    r = smi(server, token=token)
    assert r.returncode == 0, r.stdout + r.stderr
    return [l for l in r.stdout.splitlines() if l.startswith("  pid ")]


def wait_for_session(server, prog, timeout=20):
    """The pid of the session whose identity names prog, once rgpu-smi lists it."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for row in session_rows(server):
            if f"prog={prog}" in row:
                return row.split()[1]
        time.sleep(0.1)
    raise AssertionError(f"no session of {prog} listed within {timeout} s")


def row_of(server, pid):
    rows = [r for r in session_rows(server) if r.split()[1] == pid]
    assert rows, f"session {pid} is not listed"
    return rows[0]


def totals(out):
    line = [l for l in out.splitlines() if l.startswith("rounds ")]
    assert line, out
    return line[0]


class PausedClient:
    """reconnect_test, waiting after its first round until `release`."""

    def __init__(self, server, tmp_path):
        self.go = tmp_path / "go"
        env = dict(os.environ, LD_LIBRARY_PATH=str(BUILD / "lib"), RGPU_SERVER=server.addr, **HEARTBEAT)
        env.pop("RGPU_TOKEN", None)
        self.proc = subprocess.Popen([PROGRAM, IMAGE, ROUNDS, str(self.go)], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def release(self):
        self.go.touch()

    def makes_no_progress_for(self, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            time.sleep(0.1)
        return True

    def finish(self, timeout=60):
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def two_gpu_server(monkeypatch):
    monkeypatch.setenv("RGPU_FAKE_DEVICES", "2")
    for k, v in HEARTBEAT.items():
        monkeypatch.setenv(k, v)
    s = Server()
    yield s
    s.stop()


def clean_run(server):
    """An untouched run's totals, and how long it took."""
    start = time.time()
    r = run_client([PROGRAM, IMAGE, ROUNDS], server, env_extra=HEARTBEAT)
    assert r.returncode == 0, r.stdout + r.stderr
    return totals(r.stdout), time.time() - start


def test_suspended_session_waits_and_resumes_byte_exact(two_gpu_server, tmp_path):
    server = two_gpu_server
    expected, took = clean_run(server)
    client = PausedClient(server, tmp_path)
    try:
        pid = wait_for_session(server, "reconnect_test")
        r = smi(server, "resume", pid)
        assert r.returncode == 1 and f"session {pid} is not suspended" in r.stderr, r.stdout + r.stderr
        r = smi(server, "suspend", pid)
        assert r.returncode == 0 and f"session {pid} suspended" in r.stdout, r.stdout + r.stderr
        assert "(suspended" in row_of(server, pid)
        r = smi(server, "suspend", pid)
        assert r.returncode == 1 and f"session {pid} is already suspended" in r.stderr, r.stdout + r.stderr
        # Released, the client's next call waits in the suspended session: more than three
        # heartbeat intervals, and several times what the whole untouched run took.
        client.release()
        assert client.makes_no_progress_for(max(4.0, 3 * took)), client.finish()
        r = smi(server, "resume", pid)
        assert r.returncode == 0 and f"session {pid} resumed" in r.stdout, r.stdout + r.stderr
        rc, out, err = client.finish()
        assert rc == 0, out + err
        assert totals(out) == expected
        assert "reconnecting" not in err, err  # a pause, not a broken connection
    finally:
        client.kill()
    assert f"rgpu-smi suspend of session {pid}" in server.text()


QUERIES = SHIM_PREAMBLE + textwrap.dedent(r"""
    import time
    def free_bytes():
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        ok(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "MemGetInfo")
        return free.value
    before = [free_bytes() for i in range(100)]
    print("asked", flush=True)  # the worker parks now: the next query runs on the reading thread
    go = sys.argv[1]
    for i in range(6000):
        if os.path.exists(go):
            break
        time.sleep(0.01)
    after = [free_bytes() for i in range(100)]
    print("same:", set(before) == set(after))
""")


def test_a_query_run_on_the_reading_thread_of_a_suspended_session_leaves_heartbeats_answered(two_gpu_server,
                                                                                             tmp_path):
    # cuMemGetInfo is a call the session's reading thread runs itself when its client thread's
    # worker is idle (server/session.cpp, run_on_reader). Suspended, the driver blocks it there:
    # another thread must read on (stand_by), or the client's heartbeats go unanswered and it
    # reconnects.
    server = two_gpu_server
    script = tmp_path / "queries.py"
    script.write_text(QUERIES)
    go = tmp_path / "go"
    env = dict(os.environ, LD_LIBRARY_PATH=str(BUILD / "lib"), RGPU_SERVER=server.addr,
               SHIM=str(BUILD / "lib/libcuda.so.1"), **HEARTBEAT)
    env.pop("RGPU_TOKEN", None)
    proc = subprocess.Popen(["python3", str(script), str(go)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        pid = wait_for_session(server, "python")  # comm: python3, python3.11, ...
        assert proc.stdout.readline().strip() == "asked"
        assert smi(server, "suspend", pid).returncode == 0
        go.touch()
        deadline = time.time() + 4  # four heartbeat intervals
        while time.time() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        r = smi(server, "resume", pid)
        assert r.returncode == 0, r.stdout + r.stderr
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "same: True" in out, out + err
        assert "reconnecting" not in err, err  # a pause, not a broken connection
        assert "another thread reads the client's frames meanwhile" in server.text(), server.text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_migrate_moves_the_session_to_gpu_1_and_it_finishes_byte_exact(two_gpu_server, tmp_path):
    server = two_gpu_server
    expected, _ = clean_run(server)
    client = PausedClient(server, tmp_path)
    try:
        pid = wait_for_session(server, "reconnect_test")
        r = smi(server, "migrate", pid, "--gpu", "5")
        assert r.returncode == 1 and "GPU 5 does not exist: this server has 2 GPUs (0 to 1)" in r.stderr, r.stderr
        r = smi(server, "migrate", pid, "--gpu", "0")
        assert r.returncode == 1 and f"session {pid} is on GPU 0 already" in r.stderr, r.stderr
        r = smi(server, "migrate", pid, "--gpu", "1")
        assert r.returncode == 0 and f"session {pid} moved from GPU 0 to GPU 1" in r.stdout, r.stdout + r.stderr
        row = row_of(server, pid)
        assert "(on GPU 1)" in row and "(suspended" not in row, row
        r = smi(server, "migrate", pid, "--gpu", "1")
        assert r.returncode == 1 and f"session {pid} is on GPU 1 already" in r.stderr, r.stderr
        # A suspended session moves too, and runs again on the GPU it moves to.
        assert smi(server, "suspend", pid).returncode == 0
        r = smi(server, "migrate", pid, "--gpu", "0")
        assert r.returncode == 0 and "moved from GPU 1 to GPU 0 (it was suspended: it runs again)" in r.stdout, \
            r.stdout + r.stderr
        client.release()
        rc, out, err = client.finish()
        assert rc == 0, out + err
        assert totals(out) == expected
    finally:
        client.kill()


def test_unknown_sessions_and_bad_usage_are_refused_clearly(two_gpu_server):
    server = two_gpu_server
    r = smi(server, "suspend", "999999")
    assert r.returncode == 1 and "999999 is not a live session of this server" in r.stderr, r.stderr
    own = [row for row in session_rows(server)]  # nothing but rgpu-smi's own connection
    assert all("(this rgpu-smi)" in row for row in own), own
    r = smi(server, "migrate", "999999")
    assert r.returncode == 2 and "--gpu N" in r.stderr, r.stderr
    r = smi(server, "suspend", "twelve")
    assert r.returncode == 2 and "give the session's pid" in r.stderr, r.stderr
    r = smi(server, "hibernate", "1")
    assert r.returncode == 2 and "unknown command" in r.stderr, r.stderr


def test_a_token_server_refuses_rgpu_smi_without_the_token(token_server):
    server, token = token_server, "correct horse battery staple"  # conftest's token_server
    r = smi(server, "suspend", "999999")
    assert r.returncode == 1 and "cannot reach rgpu-server" in r.stderr, r.stdout + r.stderr
    assert "token" in r.stderr, r.stderr
    r = smi(server, "suspend", "999999", token=token)
    assert r.returncode == 1 and "999999 is not a live session of this server" in r.stderr, r.stderr


def test_session_control_that_does_not_decode_ends_that_connection_only(server):
    op = wire.CONTROL["kOpSessionControl"]
    with wire.Conn(server.addr) as c:
        c.send(wire.frame(op, b"\x01\x02", 0, 1, 1))  # 2 bytes of 9
        assert wire.peer_closed(c.sock)
    with wire.Conn(server.addr) as c:
        # An action this server does not know: answered, with words, and the connection stays.
        r = c.call(op, wire.session_control(9, os.getpid()))
        assert r.result == wire.CUDA_ERROR_NOT_SUPPORTED, r
        (n,) = struct.unpack_from("<I", r.body)
        assert "does not know session action 9" in r.body[4:4 + n].decode(), r.body
        r = c.call(op, wire.session_control(wire.CONTROL["kSessionSuspend"], os.getpid()))
        assert r.result == wire.CUDA_ERROR_INVALID_VALUE, r  # the test itself is no session of the server
        assert r.body[4 + struct.unpack_from("<I", r.body)[0]] == wire.CONTROL["kSessionStateUnknown"]
    assert wire.healthy_session(server.addr) > 0
    assert server.alive()
