"""Fixtures for the PyTorch device tests (test_device_*.py import them from here; this is not a
conftest, so the other tests of this folder see none of it): rgpu-opserver --device cpu on a free
loopback port, started at the first test that needs it and stopped at exit, with RGPU_OPSERVER
pointing at it during each test (the client reads it at its first connection); OpServer for
tests that need a server of their own (tokens, versions); run_python for fresh processes.

Importing this module skips the importing test module when torch is missing or rgpu-opserver is
not built. The build directory is $RGPU_BUILD_DIR (default build/); it must hold
bin/rgpu-opserver and lib/librgpu_torch.so."""
import atexit
import itertools
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("RGPU_BUILD_DIR", ROOT / "build")).resolve()
# The server's device: cpu in CI; tests/gpu/run.sh sets cuda. Where results cannot match the
# client's cpu to the bit on a GPU (other random generators, other summation orders), tests say
# how they check instead.
SERVER_DEVICE = os.environ.get("RGPU_TEST_OPSERVER_DEVICE", "cpu")
ON_CUDA = SERVER_DEVICE == "cuda"
OPSERVER = BUILD / "bin" / "rgpu-opserver"

pytest.importorskip("torch", reason="the PyTorch device tests need torch installed")
if not OPSERVER.exists():
    pytest.skip(f"{OPSERVER} is not built (configure CMake with a Python that has torch: "
                "-DRGPU_TORCH_PYTHON=...)", allow_module_level=True)

# Run from the source tree: the package in python/, the backend from this build.
os.environ["RGPU_BUILD_DIR"] = str(BUILD)
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))  # tests/fault_proxy.py, shared with tests/e2e


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_server_numbers = itertools.count()


class OpServer:
    """One rgpu-opserver process on a free port; stop() ends it (also at exit)."""

    def __init__(self, token=None, extra_args=(), port=None):
        self.port = port or free_port()
        self.addr = f"127.0.0.1:{self.port}"
        # One log per server started, even on a port used before (a restarted server must not
        # truncate the log its predecessor's sessions still write to).
        self.log_path = BUILD / f"rgpu-opserver-{self.port}-{next(_server_numbers)}.log"
        # RGPU_TEST_OPSERVER_DEVICE=cuda runs the same tests against the GPU (tests/gpu/run.sh).
        args = [str(OPSERVER), "--device", SERVER_DEVICE, "--listen", self.addr, *extra_args]
        env = dict(os.environ)
        env.pop("RGPU_TOKEN", None)
        # One intra-op thread, as the parity tests' local reference runs (test_device_parity.py):
        # the same kernels on both sides, and no OpenMP threads spinning on a busy 2-core machine
        # (a DCGAN's 24 steps took 38 s on 2 threads under ctest -j2 load, 1.7 s on one).
        env.setdefault("OMP_NUM_THREADS", "1")
        if token:
            token_file = BUILD / f"opserver-token-{self.port}"
            token_file.write_text(token + "\n")
            args += ["--token-file", str(token_file)]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        atexit.register(self.stop)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rgpu-opserver exited at start; see {self.log_path}:\n{self.log_path.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"rgpu-opserver did not start listening; see {self.log_path}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()




def python_env(env_extra=None):
    """The environment of a fresh Python with rgpu importable (run_python's)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return env


def run_python(code, env_extra=None, timeout=120):
    """Runs code in a fresh Python with rgpu importable; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-c", code], env=python_env(env_extra), capture_output=True, text=True,
                          timeout=timeout)


_shared = []


def shared_opserver():
    """The server every in-process test uses (one for the whole run), started at the first call."""
    if not _shared:
        _shared.append(OpServer())
    return _shared[0]


@pytest.fixture(scope="session")
def opserver():
    """The server every in-process test uses (one for the whole run)."""
    return shared_opserver()


@pytest.fixture(scope="module")
def two_devices():
    """An rgpu-opserver of its own that presents two devices (--devices 2); on a cuda server it
    needs two GPUs, and the tests that use it skip, saying so, where it cannot start."""
    try:
        server = OpServer(extra_args=["--devices", "2"])
    except RuntimeError as e:
        if ON_CUDA:
            pytest.skip(f"this machine cannot present two CUDA devices: {e}")
        raise
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def use_opserver(opserver, monkeypatch):
    """Points this process's rgpu client at the shared server (autouse in modules importing it)."""
    monkeypatch.setenv("RGPU_OPSERVER", opserver.addr)
    monkeypatch.delenv("RGPU_TOKEN", raising=False)
