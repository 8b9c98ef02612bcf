"""RGPU_PROGRESS: a copy slowed to over two seconds by rgpu-delay-proxy's bandwidth cap shows how far
it is on stderr with RGPU_PROGRESS=1 (a few lines, stderr being no terminal here), and nothing with
RGPU_PROGRESS=0; a quick copy shows nothing either way."""
import subprocess

import pytest

from conftest import BUILD, SHIM_PREAMBLE, free_port, run_client, wait_for_port

# Copies argv[1] MiB to the GPU.
COPY = SHIM_PREAMBLE + """
n = int(sys.argv[1]) << 20
p = ctypes.c_uint64()
ok(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)), "cuMemAlloc_v2")
buf = ctypes.create_string_buffer(n)
ok(cu.cuMemcpyHtoD_v2(p, buf, ctypes.c_size_t(n)), "cuMemcpyHtoD_v2")
print("copied")
"""


@pytest.fixture
def slow_link(server):
    """server's address behind a 40 Mbit/s link (16 MiB take about 3.4 s)."""
    port = free_port()
    proxy = subprocess.Popen([str(BUILD / "bin/rgpu-delay-proxy"), "--listen", f"127.0.0.1:{port}", "--target",
                              server.addr, "--delay-ms", "2", "--bandwidth-mbps", "40"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert wait_for_port(port)
    yield f"127.0.0.1:{port}"
    proxy.terminate()
    proxy.wait(5)


def copy(tmp_path, server, mib, progress):
    script = tmp_path / "copy.py"
    script.write_text(COPY)
    r = run_client(["python3", str(script), str(mib)], server,
                   env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_PROGRESS": progress})
    assert r.returncode == 0 and "copied" in r.stdout, r.stdout + r.stderr
    return [line for line in r.stderr.splitlines() if line.startswith("rgpu: copying to the GPU:")]


def test_a_slow_copy_says_how_far_it_is(slow_link, tmp_path):
    lines = copy(tmp_path, slow_link, 16, "1")
    assert 2 <= len(lines) <= 3, lines  # one at 2 s, perhaps one more at 5 s, and the end
    assert " of 16.8 MB (" in lines[0] and "MB/s" in lines[0], lines
    assert lines[-1].startswith("rgpu: copying to the GPU: done, 16.8 MB in "), lines
    assert copy(tmp_path, slow_link, 16, "0") == []


def test_a_quick_copy_says_nothing(server, tmp_path):
    assert copy(tmp_path, server, 16, "1") == []
