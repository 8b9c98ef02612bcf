"""The PyTorch device's session survives the network (issue 16): a small GPT trained on the rgpu
device through rgpu-faultproxy, which cuts its connection 10 times at random points, gives losses
bit-identical to an uncut run (every call ran once: a call run twice or lost would change them);
an opserver killed and started again on the same port hands the reconnecting client its session;
a session whose client stays away past --session-grace ends, and the client's next call says so;
SIGTERM drains: the client logs the notice and finishes, or past --drain-timeout is told why its
session ended."""
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from device_fixtures import BUILD, OpServer, python_env, run_python
from fault_proxy import FaultProxy

PROXY = BUILD / "bin" / "rgpu-faultproxy"
HERE = Path(__file__).resolve().parent

# Trains parity_programs' GPT (tied embeddings, AdamW, clipping) for its 24 steps on rgpu and
# prints the losses as exact hex floats, with the device's counters. With PAUSE set, waits after
# step 0 until that file exists (a test breaks the connection meanwhile).
TRAIN = f"""
import json, os, sys, time
sys.path.insert(0, {str(HERE)!r})
import torch, rgpu
from parity_programs import SEED, STEPS, gpt_program
torch.manual_seed(SEED)
model, make_opt, step = gpt_program()
model = model.to("rgpu")
opt = make_opt(model)
losses = []
for k in range(STEPS):
    (loss,) = step(model, opt, k, "rgpu")
    losses.append(loss.item().hex())
    pause = os.environ.get("PAUSE")
    if k == 0 and pause:
        deadline = time.time() + 60
        while not os.path.exists(pause) and time.time() < deadline:
            time.sleep(0.02)
print(json.dumps({{"losses": losses, "stats": rgpu.stats()}}))
"""


def train(addr, env=None):
    r = run_python(TRAIN, {"RGPU_OPSERVER": addr, **(env or {})}, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


@pytest.fixture
def runtime_dir():
    d = tempfile.mkdtemp(prefix="rgpu-rt-")  # short: a Unix socket path has 108 bytes
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def server(runtime_dir):
    s = OpServer(extra_args=["--runtime-dir", runtime_dir])
    yield s
    s.stop()


def test_a_gpt_trained_through_10_cuts_has_the_losses_of_an_uncut_run(server):
    uncut, _ = train(server.addr)
    assert uncut["stats"]["resumes"] == 0
    sent = uncut["stats"]["bytes_sent"]
    # Ten connections, each cut at a random point; together they take about half the run's
    # traffic, so every cut falls inside the run.
    proxy = FaultProxy(PROXY, server.addr, "--fault", "cut", "--after-bytes", str(sent // 40),
                       "--after-bytes-max", str(sent // 10), "--seed", "7", "--connections", "11")
    try:
        cut, err = train(proxy.addr)
    finally:
        proxy.stop()
    assert cut["stats"]["resumes"] == 10, err[-3000:]
    assert cut["losses"] == uncut["losses"]
    assert cut["stats"]["waits"] == uncut["stats"]["waits"]


def test_a_restarted_opserver_hands_the_reconnecting_client_its_session(runtime_dir, tmp_path):
    first = OpServer(extra_args=["--runtime-dir", runtime_dir])
    uncut, _ = train(first.addr)
    go = tmp_path / "go"
    proxy = FaultProxy(PROXY, first.addr, "--fault", "cut", "--on-signal", "--connections", "2")
    client = subprocess.Popen([sys.executable, "-c", TRAIN], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=python_env({"RGPU_OPSERVER": proxy.addr, "PAUSE": str(go)}))
    second = None
    try:
        # The client's session is running on the first opserver (the second session it started:
        # the uncut run was the first).
        deadline = time.time() + 60
        while first.log_path.read_text().count("started") < 2 and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(5)
        # The old opserver's spare ends with it (a moment later): until then the port is taken.
        for _ in range(50):
            try:
                second = OpServer(extra_args=["--runtime-dir", runtime_dir], port=first.port)
            except RuntimeError:  # it could not listen
                second = None
            time.sleep(0.2)
            if second and second.proc.poll() is None:
                break
            second = None
        assert second, "a second rgpu-opserver could not listen on the port"
        proxy.strike()
        go.touch()
        out, err = client.communicate(timeout=300)
        assert client.returncode == 0, err[-4000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["losses"] == uncut["losses"]
        assert result["stats"]["resumes"] == 1
        assert "resumes session" in second.log_path.read_text()
    finally:
        if client.poll() is None:
            client.kill()
        proxy.stop()
        if second:
            second.stop()


def test_a_session_whose_client_stays_away_past_the_grace_ends_with_a_clear_error(runtime_dir, tmp_path):
    server = OpServer(extra_args=["--runtime-dir", runtime_dir, "--session-grace", "2"])
    go = tmp_path / "go"
    # The first connection is cut on request; every later one is closed at once (the server is
    # unreachable), so the session cannot be resumed and its grace runs out.
    proxy = FaultProxy(PROXY, server.addr, "--fault", "cut", "--on-signal", "--connections", "2",
                       "--max-connections", "2")
    try:
        client = subprocess.Popen([sys.executable, "-c", TRAIN], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=python_env({"RGPU_OPSERVER": proxy.addr, "PAUSE": str(go),
                                                                 "RGPU_RECONNECT": "4"}))
        deadline = time.time() + 60
        while "started" not in server.log_path.read_text() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        proxy.strike()
        go.touch()
        out, err = client.communicate(timeout=120)
        assert client.returncode != 0
        assert "lost the session on rgpu-opserver" in err, err[-3000:]
        assert "RuntimeError" in err
        # The server ended the session at its grace.
        deadline = time.time() + 20
        while "the session ended" not in server.log_path.read_text() and time.time() < deadline:
            time.sleep(0.1)
        assert "the session ended" in server.log_path.read_text()
    finally:
        proxy.stop()
        server.stop()


# Makes a tensor, waits until GO exists, then computes with it: the drain's notice reaches the
# client at its next call.
PAUSED = """
import os, time
import torch, rgpu
x = torch.ones(1000, device="rgpu")
print("ready", flush=True)
deadline = time.time() + 60
while not os.path.exists(os.environ["GO"]) and time.time() < deadline:
    time.sleep(0.02)
print((x * 2).sum().item(), flush=True)
"""


def paused_client(server, go):
    return subprocess.Popen([sys.executable, "-c", PAUSED], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=python_env({"RGPU_OPSERVER": server.addr, "GO": str(go)}))


def wait_for_ready(client):
    line = client.stdout.readline()
    assert line.strip() == "ready", line + client.stderr.read()


def test_sigterm_drains_the_client_logs_the_notice_and_finishes(runtime_dir, tmp_path):
    server = OpServer(extra_args=["--runtime-dir", runtime_dir, "--drain-timeout", "30"])
    go = tmp_path / "go"
    client = paused_client(server, go)
    try:
        wait_for_ready(client)
        server.proc.send_signal(signal.SIGTERM)
        deadline = time.time() + 30
        # The session's own line, logged as it sends the client its notice (protocol/drain.cpp).
        while "; told it so" not in server.log_path.read_text() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the notice on its way
        go.touch()
        out, err = client.communicate(timeout=60)
        assert client.returncode == 0, err[-3000:]
        assert out.split()[-1] == "2000.0"
        assert f"rgpu-opserver at {server.addr} is shutting down; 30 s to finish" in err, err[-3000:]
        # The client left: the server is done, long before the drain time.
        assert server.proc.wait(20) == 0, server.log_path.read_text()
    finally:
        if client.poll() is None:
            client.kill()
        server.stop()


def test_past_the_drain_timeout_the_clients_next_call_says_why_its_session_ended(runtime_dir, tmp_path):
    server = OpServer(extra_args=["--runtime-dir", runtime_dir, "--drain-timeout", "1"])
    go = tmp_path / "go"
    client = paused_client(server, go)
    try:
        wait_for_ready(client)
        start = time.time()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(20) == 0, server.log_path.read_text()
        assert time.time() - start < 10
        go.touch()
        out, err = client.communicate(timeout=60)
        assert client.returncode != 0
        assert "RuntimeError" in err and "lost the session on rgpu-opserver" in err, err[-3000:]
        assert "its drain time of 1 s ran out" in err, err[-3000:]
        assert "2000.0" not in out
    finally:
        if client.poll() is None:
            client.kill()
        server.stop()
