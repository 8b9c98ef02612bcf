"""torch.distributed's NCCL backend and DistributedDataParallel through rgpu (docs/design.md §6,
"NCCL"): two ranks, stock PyTorch with rgpu's libcuda.so.1 and libnccl.so.2 (LD_PRELOAD, since
libtorch_cuda's RPATH would find the pip package's libnccl.so.2 first), on the fake driver and
fake NCCL with no-op kernels; on one server with two fake GPUs and on two servers.
torch_ddp_on_fake.py holds the checks: collectives byte for byte, data-parallel losses equal to
one process's, DDP's steps."""
import os
import subprocess

import pytest

from conftest import BUILD, Server, free_port
from test_torch import HERE, torch_python


@pytest.fixture
def noop(monkeypatch):
    monkeypatch.setenv("RGPU_FAKE_NOOP_KERNELS", "1")


def run_ranks(py, servers, world=2):
    port = free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "LD_LIBRARY_PATH": str(BUILD / "lib"), "LD_PRELOAD": str(BUILD / "lib/libnccl.so.2"),
               "RGPU_SERVER": servers, "RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port)}
        env.pop("RGPU_TOKEN", None)
        procs.append(subprocess.Popen([py, str(HERE / "torch_ddp_on_fake.py")], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        outs.append((p.returncode, out))
    return outs


def check_ranks(outs):
    losses = set()
    for rank, (rc, out) in enumerate(outs):
        assert rc == 0 and f"torch_ddp_on_fake rank {rank}: 0 failed" in out, out
        assert "FAIL" not in out, out
        losses.add([l for l in out.splitlines() if l.startswith("losses ")][0])
    assert len(losses) == 1  # every rank saw the same averaged losses


def test_ddp_on_two_gpus_of_one_server(noop):
    py = torch_python()
    s = Server(env={"RGPU_FAKE_DEVICES": "2"})
    try:
        check_ranks(run_ranks(py, s.addr))
        assert s.text().count("prog=python") >= 2
    finally:
        s.stop()


def test_ddp_on_two_servers(noop):
    py = torch_python()
    a, b = Server(), Server(env={"RGPU_FAKE_ADDRESS_SLOT": "1"})
    try:
        check_ranks(run_ranks(py, f"{a.addr},{b.addr}"))
        assert "prog=python" in a.text() and "prog=python" in b.text()
    finally:
        a.stop()
        b.stop()
