"""Pitched 2D/3D copies end to end: tests/e2e/memcpy2d_test.c through the shim, over TCP, to
rgpu-server on the fake driver (host gather/scatter, chunked boxes, device to device)."""
from conftest import BUILD, run_client

PROGRAM = str(BUILD / "bin/memcpy2d_test")


def test_pitched_copies_round_trip_byte_exact(server):
    r = run_client([PROGRAM], server)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checks passed" in r.stdout


def test_pitched_copies_with_every_call_waiting(server):
    r = run_client([PROGRAM], server, env_extra={"RGPU_BATCH": "0"})
    assert r.returncode == 0, r.stdout + r.stderr
