"""Sessions that survive the network (issue 16), on the driver path: a driver-API program through
rgpu-faultproxy, which breaks its connection at chosen or random points, must finish with the
results and the server-side call count of an unbroken run; a stalled or black-holed link is
noticed within the heartbeat bound; a restarted rgpu-server hands reconnecting clients to their
sessions; a session whose client never comes back ends at the grace with a clear error."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import BUILD, IMAGE, Server, free_port, restart_on_port, run_client, wait_for_log
from fault_proxy import FaultProxy

PROGRAM = str(BUILD / "bin/reconnect_test")
PROXY = str(BUILD / "bin/rgpu-faultproxy")


def Proxy(target, *args):
    return FaultProxy(PROXY, target, *args)


@pytest.fixture
def runtime_dir():
    # Short: a session socket's path must fit a Unix socket address (108 bytes).
    d = tempfile.mkdtemp(prefix="rgpu-rt-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def finish_on(second, client, proxy, go, rounds):
    """A paused reconnect_test whose first server is gone: cuts its connection, lets it go on, and
    checks that it finished its rounds in the session `second` handed it."""
    proxy.strike()
    go.touch()
    out, err = client.communicate(timeout=120)
    assert client.returncode == 0, out + err
    assert f"rounds {rounds}" in out
    assert "reconnecting" in err, err
    assert "resumes session" in second.text(), second.text()


def calls_served(server):
    """The call counts of the sessions the server's log says ended, in order."""
    return [int(n) for n in re.findall(r"session for .* ended after (\d+) calls", server.text())]


def wait_for_ended_sessions(server, count, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline and len(calls_served(server)) < count:
        time.sleep(0.1)
    return calls_served(server)


def totals(r):
    line = [l for l in r.stdout.splitlines() if l.startswith("rounds ")]
    assert line, r.stdout + r.stderr
    return line[0]


def test_driver_program_survives_20_cuts_at_random_points_exactly_once(runtime_dir):
    # The default grace (600 s): both sessions must end with their client's goodbye, which the
    # client delivers across a cut by waiting for its acknowledgement (a goodbye lost to a cut
    # right after its write used to keep the session for the whole grace).
    server = Server(extra_args=["--runtime-dir", runtime_dir])
    try:
        clean = run_client([PROGRAM, IMAGE, "40"], server)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        # The proxy's own readiness probe is its connection 1: the next 20 are cut.
        proxy = Proxy(server.addr, "--fault", "cut", "--after-bytes", "2000", "--after-bytes-max", "400000",
                      "--connections", "21", "--seed", "7")
        try:
            cut = run_client([PROGRAM, IMAGE, "40"], proxy.addr, timeout=300)
        finally:
            proxy.stop()
        assert cut.returncode == 0, cut.stdout + cut.stderr
        assert totals(cut) == totals(clean)
        assert cut.stderr.count("reconnecting") >= 20, cut.stderr
        calls = wait_for_ended_sessions(server, 2, timeout=40)
        # Every call ran exactly once: the server counted as many as in the unbroken run.
        assert len(calls) == 2 and calls[0] == calls[1], (calls, server.text())
        assert server.text().count("resumed from") >= 20
    finally:
        server.stop()


@pytest.mark.parametrize("fault", ["reset", "half-close"])
def test_driver_program_survives_resets_and_half_closes(runtime_dir, fault):
    server = Server(extra_args=["--runtime-dir", runtime_dir])
    proxy = Proxy(server.addr, "--fault", fault, "--after-bytes", "5000", "--after-bytes-max", "2000000",
                  "--connections", "6", "--seed", "3")
    try:
        r = run_client([PROGRAM, IMAGE, "20"], proxy.addr, env_extra={"RGPU_HEARTBEAT": "1"}, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "rounds 20" in r.stdout
        assert "reconnecting" in r.stderr
    finally:
        proxy.stop()
        server.stop()


@pytest.mark.parametrize("fault", ["stall", "blackhole"])
def test_a_silent_link_is_noticed_within_the_heartbeat_bound(runtime_dir, fault):
    server = Server(extra_args=["--runtime-dir", runtime_dir])
    # The first connection after the probe goes silent after 1 MB; the reconnect goes through.
    proxy = Proxy(server.addr, "--fault", fault, "--after-bytes", "1000000", "--connections", "2")
    try:
        start = time.time()
        r = run_client([PROGRAM, IMAGE, "10"], proxy.addr, env_extra={"RGPU_HEARTBEAT": "1"}, timeout=120)
        took = time.time() - start
        assert r.returncode == 0, r.stdout + r.stderr
        assert "rounds 10" in r.stdout
        assert "reconnecting" in r.stderr, r.stderr
        # 3 silent heartbeats of 1 s, then a reconnect on loopback: well under 15 s in all.
        assert took < 15, (took, r.stderr)
    finally:
        proxy.stop()
        server.stop()


def test_a_restarted_server_hands_the_reconnecting_client_its_session(runtime_dir, tmp_path):
    port = free_port()
    args = ["--runtime-dir", runtime_dir]
    first = Server(extra_args=args, port=port)
    # The client pauses after its first round; meanwhile the first server dies (kill -9), a second
    # one listens on the same port, and only then does the proxy cut the client's connection. The
    # client's reconnect can reach the second server only, which must hand it its session.
    proxy = Proxy(first.addr, "--fault", "cut", "--on-signal", "--connections", "2")
    env = dict(os.environ, LD_LIBRARY_PATH=str(BUILD / "lib"), RGPU_SERVER=proxy.addr)
    go = tmp_path / "go"
    client = subprocess.Popen([PROGRAM, IMAGE, "30", str(go)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    second = None
    try:
        deadline = time.time() + 20
        while "started" not in first.text() and time.time() < deadline:
            time.sleep(0.05)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(5)
        second = restart_on_port(port, args)
        finish_on(second, client, proxy, go, 30)
    finally:
        if client.poll() is None:
            client.kill()
        proxy.stop()
        first.log.close()
        if second:
            second.stop()


def test_a_session_whose_client_never_returns_ends_at_the_grace(runtime_dir):
    server = Server(extra_args=["--runtime-dir", runtime_dir, "--session-grace", "2"])
    # The client's connection is cut after 1 MB, and every later one is closed at once: the
    # session cannot be resumed.
    proxy = Proxy(server.addr, "--fault", "cut", "--after-bytes", "1000000", "--connections", "2",
                  "--max-connections", "2")
    try:
        start = time.time()
        r = run_client([PROGRAM, IMAGE, "10"], proxy.addr, timeout=120)
        assert r.returncode != 0
        assert "lost the session on rgpu-server" in r.stderr, r.stderr
        assert time.time() - start < 30
        # The server ended the session, saying why.
        deadline = time.time() + 10
        while "did not come back within 2 s" not in server.text() and time.time() < deadline:
            time.sleep(0.1)
        assert "did not come back within 2 s" in server.text(), server.text()
    finally:
        proxy.stop()
        server.stop()


def test_connect_retries_until_the_server_is_up():
    port = free_port()
    env = dict(os.environ, LD_LIBRARY_PATH=str(BUILD / "lib"), RGPU_SERVER=f"127.0.0.1:{port}")
    client = subprocess.Popen([PROGRAM, IMAGE, "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    time.sleep(1.5)
    server = Server(port=port)
    try:
        out, err = client.communicate(timeout=60)
        assert client.returncode == 0, out + err
        assert "trying again" in err, err
    finally:
        server.stop()


def test_unreachable_server_gives_up_at_the_connect_timeout():
    start = time.time()
    r = run_client([PROGRAM, IMAGE, "1"], f"127.0.0.1:{free_port()}", env_extra={"RGPU_CONNECT_TIMEOUT": "2"})
    took = time.time() - start
    assert r.returncode != 0
    assert "cannot reach rgpu-server at 127.0.0.1:" in r.stderr, r.stderr
    assert "is the server running?" in r.stderr
    assert 1.5 < took < 15, took


UPLOADS = """
import resource
buf = ctypes.create_string_buffer(8 << 20)
d = ctypes.c_uint64()
ok(cu.cuMemAlloc_v2(ctypes.byref(d), 8 << 20), "alloc")
stream = ctypes.c_void_p()
ok(cu.cuStreamCreate(ctypes.byref(stream), 0), "stream")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for i in range(128):  # 1 GiB in 8 MiB one-way uploads
    ok(cu.cuMemcpyHtoDAsync_v2(d, buf, 8 << 20, stream), "upload")
ok(cu.cuStreamSynchronize(stream), "sync")
print("grew_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_uploads_in_flight_across_cuts_stay_within_the_replay_bound(runtime_dir, tmp_path):
    from conftest import SHIM_PREAMBLE
    server = Server(extra_args=["--runtime-dir", runtime_dir])
    proxy = Proxy(server.addr, "--fault", "cut", "--after-bytes", "100000000", "--after-bytes-max", "600000000",
                  "--connections", "3", "--seed", "5")
    script = tmp_path / "uploads.py"
    script.write_text(SHIM_PREAMBLE + UPLOADS)
    try:
        r = run_client(["python3", str(script)], proxy.addr, timeout=300,
                       env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_REPLAY_MAX_MB": "32"})
        assert r.returncode == 0, r.stdout + r.stderr
        assert "reconnecting" in r.stderr, r.stderr
        grew = int(r.stdout.split("grew_kib")[1].split()[0])
        # The replay buffer (32 MiB) and the frames being written, not the gigabyte sent.
        assert grew < 96 << 10, grew
    finally:
        proxy.stop()
        server.stop()


def test_rgpu_smi_shows_a_disconnected_session_and_its_time_left(runtime_dir):
    server = Server(extra_args=["--runtime-dir", runtime_dir, "--session-grace", "60"])
    # The client's connection is cut after 1 MB and it cannot come back (later connections close).
    proxy = Proxy(server.addr, "--fault", "cut", "--after-bytes", "1000000", "--connections", "2",
                  "--max-connections", "2")
    env = dict(os.environ, LD_LIBRARY_PATH=str(BUILD / "lib"), RGPU_SERVER=proxy.addr)
    client = subprocess.Popen([PROGRAM, IMAGE, "10"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        deadline = time.time() + 30
        while "keeping the session for 60 s" not in server.text() and time.time() < deadline:
            time.sleep(0.1)
        r = run_client([str(BUILD / "bin/rgpu-smi")], server)
        assert r.returncode == 0, r.stdout + r.stderr
        line = [l for l in r.stdout.splitlines() if "reconnect_test" in l]
        assert line and "disconnected; ends in" in line[0], r.stdout
        left = int(line[0].split("ends in ")[1].split()[0])
        assert 50 <= left <= 60, line[0]
    finally:
        client.kill()
        client.communicate()
        proxy.stop()
        server.stop()


# Allocates, says so, waits for GO, then exits without another call: the goodbye at exit is the
# first frame after the break.
EXIT_AFTER_PAUSE = """
import ctypes, os, sys, time
cu = ctypes.CDLL(os.environ["SHIM"])
assert cu.cuInit(0) == 0
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(ptr), 1 << 20) == 0
print("ready", flush=True)
deadline = time.time() + 60
while not os.path.exists(os.environ["GO"]) and time.time() < deadline:
    time.sleep(0.02)
sys.exit(0)
"""


def test_a_goodbye_sent_across_a_break_still_ends_the_session(runtime_dir, tmp_path):
    """A program that exits while its connection is broken redials to deliver its goodbye, so its
    session ends then instead of keeping the GPU memory for the whole grace (600 s here)."""
    server = Server(extra_args=["--runtime-dir", runtime_dir])
    proxy = Proxy(server.addr, "--fault", "cut", "--on-signal", "--connections", "2")
    script = tmp_path / "exit.py"
    script.write_text(EXIT_AFTER_PAUSE)
    go = tmp_path / "go"
    env = dict(os.environ, LD_LIBRARY_PATH=str(BUILD / "lib"), RGPU_SERVER=proxy.addr, GO=str(go),
               SHIM=str(BUILD / "lib/libcuda.so.1"))
    env.pop("RGPU_TOKEN", None)
    client = subprocess.Popen(["python3", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        assert client.stdout.readline().strip() == "ready", client.stderr.read()
        proxy.strike()
        wait_for_log(server, "keeping the session for")  # the cut has happened: the goodbye goes after it
        go.touch()
        start = time.time()
        out, err = client.communicate(timeout=60)
        assert client.returncode == 0, err
        assert time.time() - start < 10
        calls = wait_for_ended_sessions(server, 1, timeout=20)
        assert len(calls) == 1, server.text()
        assert "resumed from" in server.text(), server.text()
    finally:
        if client.poll() is None:
            client.kill()
        proxy.stop()
        server.stop()
