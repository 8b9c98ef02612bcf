"""What the CUDA runtime needs from the driver (tests/e2e/runtime_needs_test.c), end to end
through the shim to rgpu-server on the fake driver: libraries from plain, LZ4 and zstd fatbins,
pinned memory, unified copies, stream-ordered allocation, host callbacks and the refusals."""
import json
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


def test_layouts_asked_from_the_server_launch_right(server, tmp_path):
    # With the images' layouts ignored the client asks the server (kOpParamLayout). cudart-style
    # launches name a CUkernel; the function reading of a kernel id is refused (as on driver 580)
    # and must not hide the kernel reading: that once launched PyTorch's kernels with no
    # parameters on the H200.
    stats = tmp_path / "stats.json"
    r = run_client([PROGRAM, IMAGE, IMAGE, IMAGE, IMAGE], server,
                   env_extra={"RGPU_IMAGE_LAYOUTS": "0", "RGPU_STATS": str(stats)})
    # Every check passes but the enumeration of a library's kernels, which needs the layouts the
    # client reads from the image (cuLibraryEnumerateKernels answers CUDA_ERROR_NOT_SUPPORTED).
    failed = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith("FAIL")]
    enumeration = ("cuLibraryEnumerateKernels", "cuKernelGetName", "enumerated kernels")
    assert failed and all(any(e in l for e in enumeration) for l in failed), r.stdout + r.stderr
    assert "vec_add" not in r.stdout, r.stdout
    ops = {o["op"]: o for o in json.loads(stats.read_text())["ops"]}
    # One round trip per kernel, not one per parameter and reading.
    assert "cuKernelGetParamInfo" not in ops and "cuFuncGetParamInfo" not in ops, sorted(ops)
