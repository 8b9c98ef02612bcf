"""Unmodified PyTorch (the CUDA build from PyPI) through the shim against rgpu-server on the fake
driver: start-up, device properties, byte-exact tensor round trips, pinned non_blocking copies,
events and memory statistics (torch_on_fake.py holds the checks). torch lives in the venv that
scripts/setup_torch.sh makes (or the python named by RGPU_TORCH_PYTHON); without it the test
skips and says how to get it."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD, ROOT, Server, run_client

HERE = Path(__file__).resolve().parent


def torch_python():
    py = os.environ.get("RGPU_TORCH_PYTHON") or str(ROOT / ".venv/bin/python")
    if not Path(py).exists():
        pytest.skip("no torch venv: run scripts/setup_torch.sh (or set RGPU_TORCH_PYTHON)")
    if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0:
        pytest.skip(f"{py} cannot import torch: run scripts/setup_torch.sh")
    return py


def test_stock_torch_runs_through_the_shim_on_the_fake_driver(server):
    r = run_client([torch_python(), str(HERE / "torch_on_fake.py")], server, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout
    # The shim served it: the server saw the session (not a real driver on this machine).
    assert "session" in server.text()


KERNELS_SCRIPT = r"""
import ctypes, json, os, sys
import torch
x = torch.arange(1000, device="cuda", dtype=torch.float32)  # an anonymous-namespace kernel
y = (x * 2 + 1).sin().sum()
torch.cuda.synchronize()
ctypes.CDLL(os.environ["SHIM"]).rgpu_stats_write()
print(json.dumps(json.load(open(os.environ["RGPU_STATS"]))["ops"]))
"""


def test_torch_kernels_launch_with_layouts_read_from_its_images(tmp_path, monkeypatch):
    # PyTorch's kernels, run as no-ops on the fake: the client reads every one it launches from
    # libtorch_cuda's images, kernels of internal linkage included (they were invisible once,
    # and each cost a lookup and a layout round trip), so none of those calls waits.
    py = torch_python()
    monkeypatch.setenv("RGPU_FAKE_NOOP_KERNELS", "1")
    server = Server()
    try:
        script = tmp_path / "kernels.py"
        script.write_text(KERNELS_SCRIPT)
        r = run_client([py, str(script)], server, timeout=300,
                       env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_STATS": str(tmp_path / "stats.json")})
        assert r.returncode == 0, r.stdout + r.stderr
        waited = {o["op"]: o["waited"] for o in json.loads(r.stdout.strip().splitlines()[-1]) if o["waited"]}
        for op in ("cuLibraryGetKernel", "control:42", "cuKernelGetParamInfo", "cuFuncGetParamInfo"):
            assert op not in waited, waited
    finally:
        server.stop()


def test_stock_torch_survives_5_cuts_of_its_connection(tmp_path):
    """Issue 16: PyTorch through the shim, its connection cut up to 5 times at random points (the
    torch_on_fake.py checks: byte-exact round trips, pinned copies, events); every check passes."""
    import shutil
    import tempfile
    from test_reconnect import PROXY, Proxy

    py = torch_python()
    runtime = tempfile.mkdtemp(prefix="rgpu-rt-")
    server = Server(extra_args=["--runtime-dir", runtime])
    # The proxy's readiness probe is its connection 1; the next 5 are cut.
    proxy = Proxy(server.addr, "--fault", "cut", "--after-bytes", "20000", "--after-bytes-max", "400000",
                  "--connections", "6", "--seed", "11")
    try:
        r = run_client([py, str(HERE / "torch_on_fake.py")], proxy.addr, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "FAIL" not in r.stdout
        # The five cut points are seeded; the program's traffic reaches at least three of them.
        assert r.stderr.count("reconnecting") >= 3, r.stderr
    finally:
        proxy.stop()
        server.stop()
        shutil.rmtree(runtime, ignore_errors=True)
