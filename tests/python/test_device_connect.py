"""The quick start, and what a user sees when the connection cannot be made: no server, a wrong
token, a server on another torch version. Each runs in a fresh Python (the client connects once
per process)."""
import re
import time

import pytest

from device_fixtures import SERVER_DEVICE, OpServer, opserver, run_python, use_opserver  # noqa: F401  (fixtures)

QUICK_START = 'import torch, rgpu; x = torch.ones(4, device="rgpu"); print((x*2).sum().item())'


def test_quick_start_prints_8(opserver):
    r = run_python(QUICK_START, {"RGPU_OPSERVER": opserver.addr})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "8.0"


def test_server_info_names_server_and_device(opserver):
    r = run_python("import rgpu; print(rgpu.server_info())", {"RGPU_OPSERVER": opserver.addr})
    assert r.returncode == 0, r.stderr
    assert f"rgpu-opserver at {opserver.addr}" in r.stdout and f"on {SERVER_DEVICE}" in r.stdout


FORKED = """
import os, torch, rgpu
x = torch.ones(4, device="rgpu")
pid = os.fork()
if pid == 0:
    try:
        torch.ones(4, device="rgpu") * 2
        os._exit(3)
    except RuntimeError as e:
        os._exit(0 if "forked from one connected" in str(e) else 4)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), (x * 2).sum().item())
"""


def test_forked_child_is_told_the_connection_is_the_parents(opserver):
    # The check is a flag set by a fork handler, not a getpid() call on every op (which cost 3%
    # of the client's time generating tokens); the parent keeps working after the fork.
    r = run_python(FORKED, {"RGPU_OPSERVER": opserver.addr})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "8.0"], r.stdout + r.stderr


def test_no_server_says_how_to_start_one():
    from device_fixtures import free_port
    addr = f"127.0.0.1:{free_port()}"
    start = time.time()
    r = run_python(QUICK_START, {"RGPU_OPSERVER": addr, "RGPU_CONNECT_TIMEOUT": "2"})
    took = time.time() - start
    assert r.returncode != 0
    # Tried again with backoff for RGPU_CONNECT_TIMEOUT, then the error names the cause and the fix.
    assert re.search(rf"cannot reach rgpu-opserver at {re.escape(addr)} after \d+ attempts in [\d.]+ s: "
                     r"connection refused; is it running\? start it with rgpu-opserver --device cpu\|cuda",
                     r.stderr), r.stderr
    assert 2 <= took < 30, took


@pytest.fixture(scope="module")
def token_server():
    s = OpServer(token="right-token")
    yield s
    s.stop()


def test_wrong_token_is_refused_with_advice(token_server):
    r = run_python(QUICK_START, {"RGPU_OPSERVER": token_server.addr, "RGPU_TOKEN": "wrong-token"})
    assert r.returncode != 0
    assert "rgpu-opserver" in r.stderr and "token" in r.stderr and "RGPU_TOKEN" in r.stderr, r.stderr


def test_missing_token_is_refused_with_advice(token_server):
    r = run_python(QUICK_START, {"RGPU_OPSERVER": token_server.addr, "RGPU_TOKEN": ""})
    assert r.returncode != 0
    assert "requires a token; set RGPU_TOKEN" in r.stderr, r.stderr


def test_right_token_works(token_server):
    r = run_python(QUICK_START, {"RGPU_OPSERVER": token_server.addr, "RGPU_TOKEN": "right-token"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "8.0"


def test_torch_version_mismatch_names_both_versions():
    import torch
    s = OpServer(extra_args=["--pretend-torch-version", "2.1.0"])
    try:
        r = run_python(QUICK_START, {"RGPU_OPSERVER": s.addr})
    finally:
        s.stop()
    assert r.returncode != 0
    mine = torch.__version__.split("+")[0]
    assert "rgpu-opserver runs torch 2.1.0" in r.stderr and f"this client has torch {mine}" in r.stderr, r.stderr
    assert "same torch major.minor" in r.stderr


def test_server_survives_a_malformed_client(opserver):
    import socket
    import struct
    with socket.create_connection(("127.0.0.1", opserver.port)) as s:
        s.sendall(struct.pack("<IHHII", 1 << 30, 1, 0, 0, 0))  # a hello claiming 1 GiB
        s.settimeout(5)
        try:
            assert s.recv(100) == b""  # closed
        except ConnectionResetError:
            pass
    r = run_python(QUICK_START, {"RGPU_OPSERVER": opserver.addr})
    assert r.returncode == 0 and r.stdout.strip() == "8.0", r.stderr


def test_opserver_refuses_public_bind_without_token():
    import subprocess
    from device_fixtures import OPSERVER, free_port
    r = subprocess.run([str(OPSERVER), "--device", "cpu", "--listen", f"0.0.0.0:{free_port()}"], capture_output=True,
                       text=True,
                       timeout=30)
    assert r.returncode == 2
    assert "refusing to listen on 0.0.0.0" in r.stderr and "--insecure" in r.stderr
