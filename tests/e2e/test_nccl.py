"""NCCL through rgpu (docs/design.md §6, "NCCL"): rgpu's libnccl.so.2 forwards the NCCL API to the
NCCL of each rank's server session, here the fake NCCL (fakecuda/nccl/) on the fake driver.
nccl_test (tests/e2e/nccl_test.c, a plain NCCL program) forks its ranks as processes, each with
its own sessions, and checks every collective's bytes; with two ranks on one server of two fake
GPUs, and on two servers (the ranks' NCCLs then talk to each other directly, server to server)."""
import pytest

from conftest import BUILD, Server, run_client

PROGRAM = str(BUILD / "bin/nccl_test")


def ranks_ok(r, nranks, devices):
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    for rank in range(nranks):
        line = [l for l in r.stdout.splitlines() if l.startswith(f"rank {rank}: ")]
        assert line and " 0 failed" in line[0] and f"(device {devices[rank]}," in line[0], out
    assert "FAIL" not in out, out


@pytest.fixture(scope="module")
def two_gpus():
    s = Server(env={"RGPU_FAKE_DEVICES": "2"})
    yield s
    s.stop()


@pytest.fixture(scope="module")
def two_servers():
    a = Server()
    b = Server(env={"RGPU_FAKE_ADDRESS_SLOT": "1"})
    yield a, b
    a.stop()
    b.stop()


def test_two_ranks_on_two_gpus_of_one_server(two_gpus):
    r = run_client([PROGRAM, "2"], two_gpus, timeout=60)
    ranks_ok(r, 2, [0, 1])
    assert two_gpus.text().count("prog=nccl_test") >= 2  # a session per rank


def test_two_ranks_on_two_servers(two_servers):
    a, b = two_servers
    r = run_client([PROGRAM, "2"], f"{a.addr},{b.addr}", timeout=60)
    ranks_ok(r, 2, [0, 1])
    # Each rank's NCCL ran in the session of its device's server.
    assert "prog=nccl_test" in a.text() and "prog=nccl_test" in b.text()


def test_four_ranks_two_per_server(two_servers):
    a, b = two_servers
    r = run_client([PROGRAM, "4"], f"{a.addr},{b.addr}", timeout=60)
    ranks_ok(r, 4, [0, 1, 0, 1])


def test_arguments_nccl_refuses_are_refused_at_once_and_said(two_gpus):
    r = run_client([PROGRAM, "1"], two_gpus, timeout=60)
    ranks_ok(r, 1, [0])
    assert "ncclAllReduce: datatype 99 is not an NCCL data type" in r.stderr
    assert "ncclBroadcast: root 1 is not a rank of this 1-rank communicator" in r.stderr


def test_every_call_waiting_with_batching_off(two_gpus):
    # RGPU_BATCH=0: the one-way calls (collectives, group starts and ends) wait for their answers.
    r = run_client([PROGRAM, "2"], two_gpus, env_extra={"RGPU_BATCH": "0"}, timeout=60)
    ranks_ok(r, 2, [0, 1])


def test_stats_name_each_nccl_call(two_gpus, tmp_path):
    """RGPU_STATS counts NCCL's calls under their own names (they all fell into one slot, "op:1023")."""
    import json

    stats = tmp_path / "stats.json"
    r = run_client([PROGRAM, "1"], two_gpus, timeout=60, env_extra={"RGPU_STATS": str(stats)})
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(stats.read_text())
    names = {row["op"] for row in s["ops"] + s["oneway_ops"]}
    assert {"ncclCommInitRank", "ncclAllReduce"} <= names, names
    assert not any(n.startswith("op:") or n == "other" for n in names), names
