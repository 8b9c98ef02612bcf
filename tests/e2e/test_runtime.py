"""NVIDIA's runtime and libraries, unmodified, through the shim: the nvcc programs of tests/cuda
(each built against the static and the shared cudart) against rgpu-server on the fake driver.
They exercise the export tables (client/dark_api) and everything the runtime asks of the driver
at start-up.

PASSING lists the programs known to pass; client/dark_api/README.md says what stops the others.
Every program, passing or not, must end with a verdict (no crash, no hang) and ask only for
export tables rgpu knows."""
import shutil

import pytest

from conftest import BUILD, run_client

PROGRAMS = BUILD / "tests/cuda"
NAMES = ["runtime_startup", "runtime_pinned", "runtime_host_func", "cublas_create", "cudnn_create", "cufft_plan"]
MODES = ["static", "shared"]

# (program, mode) pairs that print PASS and exit 0 through the shim on the fake driver. Add a
# pair here when it starts passing; never list one that does not.
PASSING = [(name, mode) for name in ["runtime_startup", "runtime_pinned", "runtime_host_func", "cudnn_create"]
           for mode in MODES]


def program(name, mode):
    path = PROGRAMS / f"{name}_{mode}"
    if not path.exists():
        if shutil.which("nvcc") is None:
            pytest.skip("nvcc not found: the tests/cuda programs were not built")
        pytest.fail(f"{path} was not built (target rgpu_cuda_programs)")
    return str(path)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", NAMES)
def test_runtime_program_ends_with_a_verdict_and_knows_every_export_table(server, name, mode):
    r = run_client([program(name, mode)], server)
    out = r.stdout.strip().splitlines()
    assert r.returncode >= 0, f"killed by signal {-r.returncode}:\n" + r.stdout + r.stderr
    assert out and (out[-1] == "PASS" or out[-1].startswith("FAIL")), r.stdout + r.stderr
    assert "is unknown to rgpu" not in r.stderr, r.stderr
    assert server.alive()


if PASSING:

    @pytest.mark.parametrize("name,mode", PASSING)
    def test_runtime_program_passes_through_the_shim(server, name, mode):
        r = run_client([program(name, mode)], server)
        out = r.stdout.strip().splitlines()
        assert r.returncode == 0 and out and out[-1] == "PASS", r.stdout + r.stderr
        assert "is not implemented" not in r.stderr, r.stderr
