"""Occupancy with a block-size function, VMM and stream attributes (tests/e2e/extras_test.c), end
to end through the shim to rgpu-server on the fake driver, and the refusal of shareable handles."""
from conftest import BUILD, IMAGE, run_client

PROGRAM = str(BUILD / "bin/extras_test")


def test_extras_program_passes_through_the_shim(server):
    r = run_client([PROGRAM, IMAGE], server)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "extras_test: all" in r.stdout and "checks passed" in r.stdout
    # The fake maps memory by handle (cuMemCreate, cuMemMap, cuMemSetAccess...), as JAX's allocators need.
    assert "VMM mapping skipped" not in r.stdout


def test_shareable_handles_are_refused_naming_the_call(server):
    r = run_client([PROGRAM, IMAGE], server)
    assert r.returncode == 0, r.stdout + r.stderr
    # One line per refused call: the program exports twice (test_vmm, test_shareable_refused).
    for call, times in (("cuMemExportToShareableHandle", 2), ("cuMemImportFromShareableHandle", 1)):
        lines = [l for l in r.stderr.splitlines() if f"{call} is not supported by rgpu" in l]
        assert len(lines) == times, (call, r.stderr)
        assert all("another machine" in line for line in lines), lines


def test_every_call_waiting_gives_the_same_results(server):
    r = run_client([PROGRAM, IMAGE], server, env_extra={"RGPU_BATCH": "0"})
    assert r.returncode == 0, r.stdout + r.stderr
