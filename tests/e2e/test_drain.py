"""Stopping rgpu-server (issue 16, item 6; protocol/drain.h): SIGTERM drains (the client is told,
new connections are refused, the session may finish, the server exits 0), a session still running
at --drain-timeout is ended with a reason its client prints, and SIGHUP leaves the sessions to the
next server on the port. The client is reconnect_test, paused after its first round until a file
exists (as in test_reconnect.py)."""
import os
import signal
import socket
import subprocess
import time

import pytest

from conftest import BUILD, IMAGE, Server, run_client, free_port
from test_reconnect import PROGRAM, Proxy, finish_on, runtime_dir, totals  # noqa: F401 (runtime_dir: a fixture)


def start_paused_client(addr, go, rounds):
    env = dict(os.environ, LD_LIBRARY_PATH=str(BUILD / "lib"), RGPU_SERVER=addr)
    env.pop("RGPU_TOKEN", None)
    return subprocess.Popen([PROGRAM, IMAGE, str(rounds), str(go)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_text(server, text, timeout=20, count=1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if server.text().count(text) >= count:
            return True
        time.sleep(0.05)
    return False


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False
    except ConnectionRefusedError:
        return True


def test_sigterm_tells_the_client_refuses_new_connections_and_lets_the_session_finish(runtime_dir, tmp_path):
    server = Server(extra_args=["--runtime-dir", runtime_dir])
    client = None
    try:
        clean = run_client([PROGRAM, IMAGE, "6"], server)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert wait_for_text(server, "ended after"), server.text()
        go = tmp_path / "go"
        client = start_paused_client(server.addr, go, 6)
        assert wait_for_text(server, "prog=reconnect_test from", count=2), server.text()
        server.proc.send_signal(signal.SIGTERM)
        assert wait_for_text(server, "draining 1 session for up to 60 s (--drain-timeout)"), server.text()
        assert wait_for_text(server, "; told it so"), server.text()  # the session sends its notice
        assert refused(server.port)
        assert server.alive()
        go.touch()
        out, err = client.communicate(timeout=60)
        assert client.returncode == 0, out + err
        # The notice, logged by the client as a warning, and every round byte-exact.
        assert f"rgpu-server at {server.addr} is shutting down; 60 s to finish" in err, err
        assert [l for l in out.splitlines() if l.startswith("rounds ")] == [totals(clean)], out
        # The session ended with its client; then the listener exits 0.
        assert server.proc.wait(15) == 0, server.text()
        assert "every session has ended; exiting" in server.text(), server.text()
    finally:
        if client and client.poll() is None:
            client.kill()
        server.stop()


def test_a_session_past_the_drain_timeout_is_ended_and_its_client_says_why(runtime_dir, tmp_path):
    server = Server(extra_args=["--runtime-dir", runtime_dir, "--drain-timeout", "2"])
    go = tmp_path / "go"
    client = start_paused_client(server.addr, go, 6)
    try:
        assert wait_for_text(server, "reconnect_test"), server.text()
        # Wait for the first round's end (the pause): its calls are then all answered.
        time.sleep(1)
        start = time.time()
        server.proc.send_signal(signal.SIGTERM)
        assert wait_for_text(server, "its drain time of 2 s ran out", timeout=15), server.text()
        took = time.time() - start
        assert 1.5 < took < 6, (took, server.text())
        assert server.proc.wait(15) == 0, server.text()
        assert refused(server.port)
        go.touch()
        out, err = client.communicate(timeout=60)
        assert client.returncode != 0, out + err
        assert "its drain time of 2 s ran out" in err, err
        assert "restart the program once the server is back" in err, err
        assert f"rgpu-server at {server.addr} shut down (it was stopped" in err, err
        # The first call after the pause failed as on a lost session, and so did the rest.
        assert "cuMemAlloc(&da, size) returned CUDA_ERROR_DEVICE_UNAVAILABLE" in err, err
        assert "checks FAILED" in err
    finally:
        if client.poll() is None:
            client.kill()
        server.stop()


def test_a_second_sigterm_ends_the_sessions_at_once(runtime_dir, tmp_path):
    server = Server(extra_args=["--runtime-dir", runtime_dir])
    go = tmp_path / "go"
    client = start_paused_client(server.addr, go, 6)
    try:
        assert wait_for_text(server, "reconnect_test"), server.text()
        time.sleep(1)
        server.proc.send_signal(signal.SIGTERM)
        assert wait_for_text(server, "draining 1 session"), server.text()
        start = time.time()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(15) == 0, server.text()
        assert time.time() - start < 10
        assert "again while draining: ending the 1 session left at once" in server.text(), server.text()
        go.touch()
        out, err = client.communicate(timeout=60)
        assert client.returncode != 0, out + err
        assert "ended this session at once" in err, err
    finally:
        if client.poll() is None:
            client.kill()
        server.stop()


def test_sighup_leaves_the_session_to_the_next_server_on_the_port(runtime_dir, tmp_path):
    port = free_port()
    args = ["--runtime-dir", runtime_dir]
    first = Server(extra_args=args, port=port)
    # As in test_reconnect.py's restart test: the proxy cuts the client's connection only once the
    # first server has gone and the second listens, so the client must resume on the second.
    proxy = Proxy(first.addr, "--fault", "cut", "--on-signal", "--connections", "2")
    go = tmp_path / "go"
    client = start_paused_client(proxy.addr, go, 10)
    second = None
    try:
        assert wait_for_text(first, "reconnect_test"), first.text()
        first.proc.send_signal(signal.SIGHUP)
        assert first.proc.wait(10) == 0, first.text()
        assert "SIGHUP: exiting now, leaving 1 live session running" in first.text(), first.text()
        # The port is free at once: the spare was ended before the listener exited.
        second = Server(extra_args=args, port=port)
        assert second.alive(), second.text()
        finish_on(second, client, proxy, go, 10)
    finally:
        if client.poll() is None:
            client.kill()
        proxy.stop()
        first.log.close()
        if second:
            second.stop()


def test_help_describes_stopping():
    r = subprocess.run([str(BUILD / "bin/rgpu-server"), "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    for words in ("SIGTERM", "SIGHUP", "--drain-timeout"):
        assert words in r.stdout, r.stdout


# rgpu-opserver's drain is tested with the PyTorch device: tests/python/test_device_reconnect.py.


ONE_WAY_AFTER_PAUSE = """
import time
d = ctypes.c_uint64()
ok(cu.cuMemAlloc_v2(ctypes.byref(d), 1 << 20), "alloc")
stream = ctypes.c_void_p()
ok(cu.cuStreamCreate(ctypes.byref(stream), 0), "stream")
print("paused", flush=True)
for _ in range(3000):
    if os.path.exists(sys.argv[1]):
        break
    time.sleep(0.02)
# One-way uploads first, each large enough to be written at once: the second write would meet
# the closed connection's reset before anything is read.
buf = ctypes.create_string_buffer(256 << 10)
for i in range(8):
    cu.cuMemcpyHtoDAsync_v2(d, buf, 256 << 10, stream)
    time.sleep(0.01)
print("sync", cu.cuStreamSynchronize(stream), flush=True)
"""


def test_a_client_idle_past_the_end_whose_next_calls_are_one_way_gets_the_reason(runtime_dir, tmp_path):
    from conftest import SHIM_PREAMBLE
    server = Server(extra_args=["--runtime-dir", runtime_dir, "--drain-timeout", "1"])
    script = tmp_path / "one_way.py"
    script.write_text(SHIM_PREAMBLE + ONE_WAY_AFTER_PAUSE)
    go = tmp_path / "go"
    env = dict(os.environ, LD_LIBRARY_PATH=str(BUILD / "lib"), RGPU_SERVER=server.addr,
               SHIM=str(BUILD / "lib/libcuda.so.1"))
    client = subprocess.Popen(["python3", str(script), str(go)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "paused"
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(15) == 0, server.text()
        assert "its drain time of 1 s ran out" in server.text(), server.text()
        go.touch()
        # Without a redial: the session's end is read before the calls go out (the server's
        # grace, 600 s, would be the redial's bound).
        out, err = client.communicate(timeout=30)
        assert "is shutting down; 1 s to finish" in err, err
        assert "its drain time of 1 s ran out" in err, err
        assert "reconnecting" not in err, err
        assert "sync 46" in out, out + err  # CUDA_ERROR_DEVICE_UNAVAILABLE
    finally:
        if client.poll() is None:
            client.kill()
        server.stop()
