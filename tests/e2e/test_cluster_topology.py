"""CUBLASLT_1734DC26 slots 4 and 13 (tests/e2e/cluster_topology_test.c) through the shim to
rgpu-server on the fake driver: the server's driver's GPC of each TPC reaches the program, and
slot 13 takes it back. The stub these slots were answered CUDA_ERROR_NOT_SUPPORTED."""
from conftest import BUILD, run_client

PROGRAM = str(BUILD / "bin/cluster_topology_test")


def test_cluster_topology_reaches_the_program_from_the_servers_driver(server):
    r = run_client([PROGRAM], server, env_extra={"RGPU_TRACE": "2"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cluster_topology_test: all" in r.stdout
    # The fake's H200: 66 TPCs, nine in each of the first two GPCs, eight in the other six.
    assert "token 66, 66 TPCs in 8 GPCs: 0:9 1:9 2:8 3:8 4:8 5:8 6:8 7:8" in r.stdout, r.stdout
    assert " -> " not in r.stderr, r.stderr  # no call failed
