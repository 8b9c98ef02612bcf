"""A kernel with 8 KiB of parameters (tests/e2e/large_params_test.c), end to end through the shim
to rgpu-server on the fake driver, from each kind of image: the layout comes from the image (no
round trip to ask for it) and the arguments arrive whole (issue 3)."""
import json

import pytest

from conftest import BUILD, IMAGE, run_client

PROGRAM = str(BUILD / "bin/large_params_test")
KERNELS = BUILD / "tests/kernels"


@pytest.mark.parametrize("image", [IMAGE, str(KERNELS / "test_kernels.sm_90.cubin"), str(KERNELS / "test_kernels.ptx")],
                         ids=["fatbin", "cubin", "ptx"])
def test_large_parameters_arrive_whole(server, image, tmp_path):
    stats = tmp_path / "stats.json"
    r = run_client([PROGRAM, image], server, env_extra={"RGPU_STATS": str(stats)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "large_params_test: all" in r.stdout and "checks passed" in r.stdout
    # The client read the layout from the image: it never had to ask the server for it.
    ops = {o["op"] for o in json.loads(stats.read_text())["ops"]}
    assert "cuFuncGetParamInfo" not in ops, ops
    assert server.alive()


def test_every_call_waiting_gives_the_same_results(server):
    r = run_client([PROGRAM, IMAGE], server, env_extra={"RGPU_BATCH": "0"})
    assert r.returncode == 0, r.stdout + r.stderr
