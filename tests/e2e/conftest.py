"""Fixtures for the end-to-end tests: a real rgpu-server on the fake driver, on a free loopback
port, stopped by itself at the end; and helpers to run programs through the shim."""
import itertools
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("RGPU_BUILD_DIR", ROOT / "build"))
IMAGE = os.environ.get("RGPU_TEST_IMAGE", str(BUILD / "tests/kernels/test_kernels.fatbin"))
sys.path.insert(0, str(ROOT / "tests"))  # tests/fault_proxy.py, shared with tests/python
# Answers kept across runs (client/answer_store.h) would change what later tests count; the tests
# that are about them name a file of their own.
os.environ.setdefault("RGPU_ANSWER_CACHE", "none")
os.environ.setdefault("RGPU_NVRTC_CACHE", "none")  # likewise NVRTC's compiles (test_nvrtc_cache.py)

# The start of a Python test script that drives the shim with ctypes (run with SHIM set to
# build/lib/libcuda.so.1): `cu`, a checker `ok` that exits on the first failed call, and `ctx`,
# device 0's primary context, retained and current.
SHIM_PREAMBLE = """import ctypes, os, sys, threading
cu = ctypes.CDLL(os.environ["SHIM"])
def ok(rc, what):
    if rc != 0:
        print(f"FAIL {what}: {rc}"); sys.stdout.flush(); os._exit(1)
ok(cu.cuInit(0), "cuInit")
ctx = ctypes.c_void_p()
ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "Retain")
ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
"""


def wait_for_port(port, timeout=10):
    """True once something accepts connections on the loopback port (each check is a connection
    that sends nothing, which servers log as a port check)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_server_numbers = itertools.count()


class Server:
    def __init__(self, token=None, extra_args=(), port=None, env=None):
        self.port = port or free_port()
        self.addr = f"127.0.0.1:{self.port}"
        # One log per server started, even on a port used before: a restarted server must not
        # truncate the log that its predecessor's sessions still write to.
        self.log_path = BUILD / f"rgpu-server-{self.port}-{next(_server_numbers)}.log"
        # Tests keep out of the user's module cache unless they give --cache-dir themselves.
        cache = [] if "--cache-dir" in extra_args else ["--cache-dir", "none"]
        args = [str(BUILD / "bin/rgpu-server"), "--listen", self.addr, "--driver", "fake", *cache, *extra_args]
        env = {**os.environ, **(env or {})}  # env: the server's own variables (RGPU_FAKE_DEVICES, ...)
        env.pop("RGPU_TOKEN", None)
        if token:
            token_file = BUILD / f"token-{self.port}"
            token_file.write_text(token + "\n")
            args += ["--token-file", str(token_file)]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        if not wait_for_port(self.port):
            raise RuntimeError("rgpu-server did not start: " + self.log_path.read_text())

    def alive(self):
        return self.proc.poll() is None

    def text(self):
        self.log.flush()
        return self.log_path.read_text()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def restart_on_port(port, extra_args=()):
    """A new rgpu-server on the port of one just killed: the old one's spare holds the port for a
    moment after its parent died, so it is tried for up to 10 s. Fails the test if none listens."""
    deadline = time.time() + 10
    while time.time() < deadline:
        server = Server(extra_args=extra_args, port=port)
        # It says "listening on" once it holds the port, or exits when it cannot bind (the port
        # answering proves nothing: the old spare may be what answers).
        while server.alive() and "listening on" not in server.text() and time.time() < deadline + 20:
            time.sleep(0.02)
        if server.alive():
            return server
        server.log.close()
        time.sleep(0.2)
    raise AssertionError("a second rgpu-server could not listen on the port")


def wait_for_log(server, text, timeout=30.0):
    """True once the server's log holds `text` (at once when all is well; the timeout is for a
    loaded CI machine); fails the test, showing the log's end, at timeout."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in server.text():
            return True
        time.sleep(0.05)
    raise AssertionError(f"server log has no line containing {text!r}:\n{server.text()[-3000:]}")


def run_client(args, server, token=None, env_extra=None, timeout=120):
    """Runs a program with the shim first on the library path, pointed at the server."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(BUILD / "lib")
    env["RGPU_SERVER"] = server.addr if isinstance(server, Server) else server
    env.pop("RGPU_TOKEN", None)
    if token:
        env["RGPU_TOKEN"] = token
    env.update(env_extra or {})
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)


def run_script_runs(server, tmp_path, text, args=(), runs=2, env=None):
    """Runs a ctypes script (text, with SHIM set) `runs` times with one answer cache and stats file
    in tmp_path; returns each run's output lines "key: value" as a dict."""
    script = tmp_path / "script.py"
    script.write_text(text)
    env = {"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_STATS": str(tmp_path / "stats.json"),
           "RGPU_ANSWER_CACHE": str(tmp_path / "answers.txt"), **(env or {})}
    outs = []
    for _ in range(runs):
        r = run_client(["python3", str(script), *args], server, env_extra=env)
        assert r.returncode == 0, r.stdout + r.stderr
        outs.append(dict(line.split(": ", 1) for line in r.stdout.splitlines()))
    return outs


@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def token_server():
    s = Server(token="correct horse battery staple")
    yield s
    s.stop()
