"""rgpu-server --metrics-listen: /metrics and /healthz scraped while CUDA programs run through the
shim on the fake driver. The counters must move by exactly what the programs did, the text must
parse as Prometheus exposition (prometheus_client's parser), and the endpoint must shrug off
garbage."""
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

import rgpu_wire as wire

from conftest import BUILD, IMAGE, SHIM_PREAMBLE, Server, free_port, run_client, wait_for_port

parser = pytest.importorskip("prometheus_client.parser", reason="prometheus-client is not installed (scripts/setup.sh installs it)")

TOKEN = "metrics test token"

# Allocates 1 MiB five times and 64 MiB once (no allocations ahead), copies 8 MiB up, says
# "ready" and waits for a line on stdin before it exits.
HOLDER = SHIM_PREAMBLE + """
ptrs = []
for size in [1 << 20] * 5 + [64 << 20]:
    p = ctypes.c_uint64()
    ok(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)), "cuMemAlloc_v2")
    ptrs.append(p)
buf = ctypes.create_string_buffer(8 << 20)
ok(cu.cuMemcpyHtoD_v2(ptrs[-1], buf, ctypes.c_size_t(8 << 20)), "cuMemcpyHtoD_v2")
ok(cu.cuCtxSynchronize(), "cuCtxSynchronize")
print("ready", os.getpid(), flush=True)
sys.stdin.readline()
"""


def scrape(port, path="/metrics"):
    """(status, content type, body) of GET path."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def samples(port):
    """{(name, frozenset(labels)): value} of every sample, parsed by prometheus_client."""
    status, ctype, text = scrape(port)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), (status, ctype)
    out = {}
    for family in parser.text_string_to_metric_families(text):
        assert family.name.startswith("rgpu_"), family.name
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(m, name, **labels):
    return m.get((name, frozenset(labels.items())), 0)


def allocs(m, name):
    return value(m, name, op="cuMemAlloc_v2") + value(m, name, op="alloc ahead")


def session_value(m, name, pid):
    found = [v for (n, labels), v in m.items() if n == name and dict(labels).get("session") == str(pid)]
    assert len(found) == 1, (name, pid, found)
    return found[0]


@pytest.fixture
def metrics_server(tmp_path):
    mport = free_port()
    s = Server(token=TOKEN, extra_args=["--metrics-listen", f"127.0.0.1:{mport}", "--cache-dir", str(tmp_path / "mc")])
    assert wait_for_port(mport), s.text()
    # /healthz says "starting" until the first spare session is warm (seconds on a loaded CI
    # machine); the tests begin from a server that says "ok".
    deadline = time.time() + 30
    while (answer := scrape(mport, "/healthz"))[0] != 200 and time.time() < deadline:
        time.sleep(0.05)
    assert answer[0] == 200, (answer, s.text())
    s.metrics_port = mport
    yield s
    s.stop()


def start_holder(server, tmp_path):
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    env = dict(os.environ, LD_LIBRARY_PATH=str(BUILD / "lib"), RGPU_SERVER=server.addr, RGPU_TOKEN=TOKEN,
               SHIM=str(BUILD / "lib/libcuda.so.1"), RGPU_ALLOC_AHEAD="0")
    p = subprocess.Popen(["python3", str(script)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("ready"), line + p.stderr.read()
    return p


def finish(p):
    p.stdin.write("\n")
    p.stdin.flush()
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, out + err


def test_counters_move_by_what_the_programs_did(metrics_server, tmp_path):
    port = metrics_server.metrics_port
    before = samples(port)
    assert value(before, "rgpu_sessions", state="connected") == 0
    assert value(before, "rgpu_driver_ready") == 1

    holder = start_holder(metrics_server, tmp_path)
    during = samples(port)
    assert value(during, "rgpu_sessions", state="connected") == 1
    assert value(during, "rgpu_sessions", state="grace") == 0
    # The shim sends cuMemAlloc_v2 as kOpAllocAhead ("alloc ahead") where the server has it.
    assert allocs(during, "rgpu_calls_total") - allocs(before, "rgpu_calls_total") == 6
    assert allocs(during, "rgpu_round_trips_total") - allocs(before, "rgpu_round_trips_total") == 6
    # The session's process is the server's, not the client's: found by its client's pid in the identity.
    pids = [dict(labels)["session"] for (n, labels), v in during.items() if n == "rgpu_session_gpu_memory_bytes"]
    assert len(pids) == 1
    assert session_value(during, "rgpu_session_gpu_memory_bytes", pids[0]) == 69 << 20
    assert session_value(during, "rgpu_session_calls_total", pids[0]) >= 8
    received = value(during, "rgpu_bytes_total", direction="received") - value(before, "rgpu_bytes_total", direction="received")
    assert 8 << 20 < received < 9 << 20
    assert value(during, "rgpu_bytes_total", direction="sent") > value(before, "rgpu_bytes_total", direction="sent")
    finish(holder)

    # The session's counts stay in the totals after its process is gone.
    deadline = time.time() + 5
    while value(after := samples(port), "rgpu_sessions", state="connected") and time.time() < deadline:
        time.sleep(0.05)
    assert value(after, "rgpu_sessions", state="connected") == 0
    assert allocs(after, "rgpu_calls_total") == allocs(during, "rgpu_calls_total")
    assert value(after, "rgpu_bytes_total", direction="received") >= value(during, "rgpu_bytes_total", direction="received")
    assert not any(n == "rgpu_session_gpu_memory_bytes" for (n, _) in after)

    # A shim with another token (it gives up on the server's proof), a wrong proof, then a module
    # image the cache has from the first run.
    r = run_client([str(BUILD / "bin/vector_add"), IMAGE], metrics_server, token="wrong")
    assert r.returncode != 0
    with pytest.raises(wire.Refused):
        wire.Conn(metrics_server.addr, client_proof=bytes(32))
    for _ in range(2):
        r = run_client([str(BUILD / "bin/vector_add"), IMAGE], metrics_server, token=TOKEN)
        assert r.returncode == 0, r.stdout + r.stderr
    last = samples(port)
    for reason in ("wrong_token", "client_closed"):
        assert value(last, "rgpu_handshake_failures_total", reason=reason) - value(
            before, "rgpu_handshake_failures_total", reason=reason) == 1, reason
    assert value(last, "rgpu_module_cache_hits_total") - value(before, "rgpu_module_cache_hits_total") == 1
    assert value(last, "rgpu_calls_total", op="cuLaunchKernel") - value(before, "rgpu_calls_total", op="cuLaunchKernel") == 2


def send_raw(port, data, read=True):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        if data:
            s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while read:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        return out


def test_the_endpoint_takes_garbage_and_answers_on(metrics_server):
    port = metrics_server.metrics_port
    status, _, body = scrape(port, "/healthz")
    assert status == 200 and body.startswith("ok\ndriver: CUDA "), body
    assert scrape(port, "/nope")[0] == 404
    rng = random.Random(7)
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]  # past the 16 connections
    answers = set()
    for i in range(200):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 3000)))
        if i % 3 == 1:  # nearly a request
            junk = b"GET /metrics HTTP/1.1\r\n" + junk + b"\r\n\r\n"
        out = send_raw(port, junk)
        answers.add(out[:12])
    assert answers <= {b"", b"HTTP/1.1 400", b"HTTP/1.1 431", b"HTTP/1.1 405", b"HTTP/1.1 505"}, answers
    assert send_raw(port, b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 431")
    assert send_raw(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc").startswith(b"HTTP/1.1 400")
    for s in silent:
        s.close()
    # Still answering, and the rgpu-server itself untouched.
    assert scrape(port, "/healthz")[0] == 200
    assert samples(port)
    assert metrics_server.alive()


def test_healthz_says_503_while_draining(metrics_server, tmp_path):
    port = metrics_server.metrics_port
    holder = start_holder(metrics_server, tmp_path)
    metrics_server.proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 5
    while (answer := scrape(port, "/healthz"))[0] != 503 and time.time() < deadline:
        time.sleep(0.05)
    assert answer[0] == 503 and answer[2].startswith("draining"), answer
    holder.stdin.write("\n")
    holder.stdin.flush()
    holder.communicate(timeout=30)
