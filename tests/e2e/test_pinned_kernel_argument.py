"""A kernel given pinned host memory by its host address (cudaMallocHost memory, which with
unified addressing a local GPU can read): across the network the GPU cannot, the kernel fails
with CUDA_ERROR_ILLEGAL_ADDRESS, and the client names the kernel, the address and what to do
(NVIDIA's UnifiedMemoryPerf sample hands a kernel such a latch)."""
import sys
import textwrap

from conftest import BUILD, IMAGE, SHIM_PREAMBLE, run_client

SCRIPT = SHIM_PREAMBLE + textwrap.dedent(r"""
    img = open(sys.argv[1], "rb").read()
    mod, fill = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuModuleLoadData(ctypes.byref(mod), img), "load")
    ok(cu.cuModuleGetFunction(ctypes.byref(fill), mod, b"rgpu_fill_u32"), "function")
    host = ctypes.c_void_p()
    ok(cu.cuMemAllocHost_v2(ctypes.byref(host), 4096), "pinned")  # no DEVICEMAP
    p, value, n = ctypes.c_uint64(host.value), ctypes.c_uint(7), ctypes.c_ulonglong(16)
    args = (ctypes.c_void_p * 3)(ctypes.addressof(p), ctypes.addressof(value), ctypes.addressof(n))
    ok(cu.cuLaunchKernel(fill, 1, 1, 1, 16, 1, 1, 0, None, args, None), "launch")
    print("sync", cu.cuCtxSynchronize())
""")


def test_a_kernel_given_pinned_host_memory_fails_with_a_named_reason(server, tmp_path):
    script = tmp_path / "pinned.py"
    script.write_text(SCRIPT)
    r = run_client([sys.executable, str(script), IMAGE], server, env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1")})
    assert "sync 700" in r.stdout, r.stdout + r.stderr  # CUDA_ERROR_ILLEGAL_ADDRESS
    lines = [l for l in r.stderr.splitlines() if "pinned host memory" in l]
    assert len(lines) == 1, r.stderr
    assert "rgpu_fill_u32" in lines[0] and "cudaHostAllocMapped" in lines[0], lines[0]
