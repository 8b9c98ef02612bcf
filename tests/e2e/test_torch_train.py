"""Stock PyTorch training through the shim on the fake driver (RGPU_FAKE_NOOP_KERNELS=1: kernels
run as no-ops), start-up to exit: torch_train_on_fake.py trains a small transformer in fp32, bf16
autocast and with cuBLASLt for every matmul, with AdamW. Ten runs, two at a time against one
server (each connection is its own session process); every run must exit 0 having finished
every phase, and nothing anywhere may have answered an error: no failed call in RGPU_TRACE (the
shim traces every call that fails, the server's answers and its own), no export-table stub or
other complaint from the shim on stderr, no warning or error in the server's log.

What this pins (issue 15 section 6): cuBLASLt 13's cublasLtCreate asks cuCtxGetLimit for
CU_LIMIT_CIG_ENABLED; the fake answered CUDA_ERROR_UNSUPPORTED_LIMIT, and cuBLASLt's context
setup then skipped copying the device's description into the block cublasCreate_v2 had malloc'd
for it, but reported success; every later heuristic read that uninitialised block, so a run
died in unbounded recursion inside libcublasLt or failed with CUBLAS_STATUS_NOT_SUPPORTED or
INTERNAL_ERROR depending on what the heap held. And CUBLASLT_1734DC26 slot 4, which the shim
answered CUDA_ERROR_NOT_SUPPORTED on every bf16 matmul."""
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import BUILD, Server, run_client
from test_torch import torch_python

HERE = Path(__file__).resolve().parent
RUNS, AT_ONCE = 10, 2

# A matmul of each kind PyTorch sends to cuBLAS and cuBLASLt, run with MALLOC_PERTURB_=1 so that
# every block malloc hands out reads 0xfe until written: the block cuBLASLt failed to fill (above)
# is then found on every run, not one run in three.
MATMULS = r"""
import torch
a = torch.randn(96, 64, device="cuda"); w = torch.randn(32, 64, device="cuda"); b = torch.randn(32, device="cuda")
torch.nn.functional.linear(a, w, b)                                  # addmm with bias: cuBLASLt
a @ w.t()                                                            # cublasSgemm
torch.bmm(a.view(4, 24, 64), a.view(4, 24, 64).transpose(1, 2))      # strided batched
with torch.autocast("cuda", dtype=torch.bfloat16):
    torch.nn.functional.linear(a, w, b)                              # bf16 cuBLASLt, clustered
torch.backends.cuda.preferred_blas_library("cublaslt")
a @ w.t()
torch.cuda.synchronize()
print("done")
"""

FAILED_CALL = re.compile(r"^rgpu-trace .* -> ", re.M)   # client/runtime.cpp trace_result
SHIM_COMPLAINT = re.compile(r"^rgpu\[\d+\]: (warning|error): ", re.M)  # common/log's tags
SERVER_COMPLAINT = re.compile(r"^rgpu-server\[\d+\]: (warning|error): ", re.M)


@pytest.fixture
def noop_server(monkeypatch):
    monkeypatch.setenv("RGPU_FAKE_NOOP_KERNELS", "1")
    s = Server()
    yield s
    s.stop()


def run_traced(py, script, server, trace, extra=None):
    env = {"RGPU_TRACE": str(trace), **(extra or {})}
    return run_client([py, str(script)], server, timeout=600, env_extra=env)


def assert_clean(r, trace, server):
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert r.stdout.rstrip().endswith("done"), out[-6000:]
    failed = FAILED_CALL.findall(trace.read_text())
    assert not failed, [line for line in trace.read_text().splitlines() if " -> " in line][:20]
    assert not SHIM_COMPLAINT.search(r.stderr), r.stderr[-6000:]
    assert "NOT_SUPPORTED" not in out, out[-6000:]
    log = server.text()
    assert not SERVER_COMPLAINT.search(log), log[-6000:]


def test_cublas_and_cublaslt_see_the_device_even_when_the_heap_is_dirty(noop_server, tmp_path):
    script = tmp_path / "matmuls.py"
    script.write_text(MATMULS)
    trace = tmp_path / "trace.txt"
    r = run_traced(torch_python(), script, noop_server, trace, {"MALLOC_PERTURB_": "1"})
    assert_clean(r, trace, noop_server)
    # Slot 4 reached the server's driver and slot 13 gave back what it handed out.
    text = trace.read_text()
    assert "dark:CUBLASLT_1734DC26[4]" in text and "dark:CUBLASLT_1734DC26[13]" in text


def test_a_transformer_trains_through_the_shim_ten_runs_out_of_ten(noop_server, tmp_path):
    py = torch_python()
    script = HERE / "torch_train_on_fake.py"

    def one(i):
        trace = tmp_path / f"trace{i}.txt"
        start = time.monotonic()
        r = run_traced(py, script, noop_server, trace)
        return i, r, trace, time.monotonic() - start

    start = time.monotonic()
    with ThreadPoolExecutor(AT_ONCE) as pool:
        results = list(pool.map(one, range(RUNS)))
    took = time.monotonic() - start
    print(f"{RUNS} runs, {AT_ONCE} at a time: {took:.1f} s; each " +
          " ".join(f"{t:.1f}" for _, _, _, t in results))
    for i, r, trace, _ in results:
        for phase in ("fp32", "bf16-autocast", "fp32-cublaslt"):
            assert f"phase {phase} ok" in r.stdout, f"run {i}: " + (r.stdout + r.stderr)[-6000:]
        assert "libraries libcublas.so libcublasLt.so" in r.stdout, f"run {i}: {r.stdout}"
        assert_clean(r, trace, noop_server)
