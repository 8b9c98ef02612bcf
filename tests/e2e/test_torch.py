"""Unmodified PyTorch (the CUDA build from PyPI) through the shim against rgpu-server on the fake
driver: start-up, device properties, byte-exact tensor round trips, pinned non_blocking copies,
events and memory statistics (torch_on_fake.py holds the checks). torch lives in the venv that
scripts/setup_torch.sh makes (or the python named by RGPU_TORCH_PYTHON); without it the test
skips and says how to get it."""
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, run_client

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
