"""What the CUDA runtime needs from the driver (tests/e2e/runtime_needs_test.c), end to end
through the shim to rgpu-server on the fake driver: libraries from plain, LZ4 and zstd fatbins,
pinned memory, unified copies, stream-ordered allocation, host callbacks and the refusals."""
from pathlib import Path

from conftest import BUILD, IMAGE, run_client

PROGRAM = str(BUILD / "bin/runtime_needs_test")
KERNELS = Path(IMAGE).parent
IMAGES = [IMAGE] + [str(KERNELS / f) for f in ("test_kernels.lz4.fatbin", "test_kernels.zstd.fatbin")]


def test_runtime_needs_program_passes_through_the_shim(server):
    r = run_client([PROGRAM, *IMAGES], server)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "runtime_needs_test: all" in r.stdout and "checks passed" in r.stdout


def test_refusals_name_the_call_and_the_reason(server):
    r = run_client([PROGRAM, IMAGE], server)
    assert r.returncode == 0, r.stdout + r.stderr
    for call in ("cuIpcGetMemHandle",
                 "cuMemHostGetDevicePointer (pinned memory allocated without DEVICEMAP)"):
        lines = [l for l in r.stderr.splitlines() if f"{call} is not supported by rgpu" in l]
        assert len(lines) == 1, (call, r.stderr)
        assert "network" in lines[0] or "another machine" in lines[0], lines[0]


def test_every_call_waiting_gives_the_same_results(server):
    r = run_client([PROGRAM, IMAGE], server, env_extra={"RGPU_BATCH": "0"})
    assert r.returncode == 0, r.stdout + r.stderr
