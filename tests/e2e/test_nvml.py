"""rgpu's NVML shim (libnvidia-ml.so.1) end to end: an NVML program and rgpu-smi through the shim,
rgpu-server and the fake NVML (libfakenvml.so, which reports fakecuda's H200)."""
import json
import os
import subprocess
import sys
import time

from conftest import BUILD, Server, run_client

NVML_TEST = str(BUILD / "bin/nvml_test")
RGPU_SMI = str(BUILD / "bin/rgpu-smi")
FAKE_TOTAL_MIB = "143771"
FAKE_UUID = "GPU-72677075-2d66-616b-652d-483230300001"


def test_nvml_program_sees_the_servers_gpu(server):
    r = run_client([NVML_TEST, FAKE_TOTAL_MIB], server)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "NVML TEST PASSED" in r.stdout
    assert "NVIDIA H200 (rgpu fake)" in r.stdout
    assert FAKE_UUID in r.stdout
    assert "00000000:1B:00.0" in r.stdout
    assert "compute capability 9.0" in r.stdout
    # The calls were served by the server, through its NVML library.
    text = server.text()
    assert "libfakenvml.so loaded" in text
    assert "prog=nvml_test" in text


def test_nvml_calls_are_traced_with_their_results_by_name(server, tmp_path):
    trace = tmp_path / "trace.txt"
    r = run_client([NVML_TEST, FAKE_TOTAL_MIB], server, env_extra={"RGPU_TRACE": str(trace)})
    assert r.returncode == 0, r.stdout + r.stderr
    text = trace.read_text()
    assert "rgpu-trace nvml tid=1 nvmlDeviceGetP2PStatus\n" in text, text
    # nvml_test's handle the server never gave out, and the fake's unsupported NVLink query.
    assert "nvmlDeviceGetName -> NVML_ERROR_INVALID_ARGUMENT (2)" in text, text
    assert "nvmlDeviceGetNvLinkRemoteDeviceType -> NVML_ERROR_NOT_SUPPORTED (3)" in text, text


def test_rgpu_smi_lists_the_gpu(server):
    r = run_client([RGPU_SMI], server)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"rgpu-server: {server.addr}" in r.stdout
    assert "GPUs:        1" in r.stdout
    assert f"GPU 0: NVIDIA H200 (rgpu fake) ({FAKE_UUID})" in r.stdout
    assert f"/ {FAKE_TOTAL_MIB} MiB total" in r.stdout
    assert "temperature: 31 C" in r.stdout
    assert "sessions:" in r.stdout


def test_rgpu_smi_dash_L_lists_the_gpus_as_nvidia_smi_does(server):
    # The client images install rgpu-smi as nvidia-smi, for `nvidia-smi -L` (deploy/README.md).
    r = run_client([RGPU_SMI, "-L"], server)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == f"GPU 0: NVIDIA H200 (rgpu fake) (UUID: {FAKE_UUID})\n"


def test_rgpu_smi_uses_rgpus_nvml_even_when_the_library_path_names_another(server, tmp_path):
    # On a GPU host LD_LIBRARY_PATH often names the driver's folder, whose libnvidia-ml.so.1 is the
    # real one (no rgpu_nvml_sessions: "symbol lookup error" on the H200). A stand-in library
    # of that name first on the path must not be loaded.
    (tmp_path / "libnvidia-ml.so.1").symlink_to(BUILD / "lib/libcuda.so.1")
    r = run_client([RGPU_SMI], server, env_extra={"LD_LIBRARY_PATH": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"GPU 0: NVIDIA H200 (rgpu fake) ({FAKE_UUID})" in r.stdout


def test_rgpu_smi_lists_live_sessions(server):
    # A CUDA client holds a session while rgpu-smi asks; once it has left, the list drops it.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import ctypes, sys, time; cu = ctypes.CDLL('libcuda.so.1'); "
                               "assert cu.cuInit(0) == 0; print('up', flush=True); sys.stdin.readline()"],
        env={**os.environ, "LD_LIBRARY_PATH": str(BUILD / "lib"), "RGPU_SERVER": server.addr},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        r = run_client([RGPU_SMI], server)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "sessions:    2" in r.stdout, r.stdout
        rows = [l for l in r.stdout.splitlines() if l.startswith("  pid ")]
        assert any("prog=rgpu-smi" in l and "(this rgpu-smi)" in l for l in rows), rows
        assert any(f"pid={holder.pid} prog=python" in l for l in rows), rows
    finally:
        holder.stdin.close()
        holder.wait(10)
    for _ in range(50):  # the session process ends just after its client
        r = run_client([RGPU_SMI], server)
        if "sessions:    1" in r.stdout:
            break
        time.sleep(0.1)
    assert "sessions:    1" in r.stdout, r.stdout


def test_rgpu_smi_sessions_json_gives_memory_calls_and_rate(server):
    # A client that allocates 32 MiB and makes calls for about two seconds, then on until the end.
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import ctypes, sys, time; cu = ctypes.CDLL('libcuda.so.1'); assert cu.cuInit(0) == 0\n"
         "ctx = ctypes.c_void_p(); cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0); cu.cuCtxSetCurrent(ctx)\n"
         "p = ctypes.c_uint64(); assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(32 << 20)) == 0\n"
         "t = time.time()\n"
         "while time.time() - t < 2.5: cu.cuCtxSynchronize()\n"
         # It goes on calling until the test is done: the rate is sampled once a second, and a
         # holder gone quiet reads 0 calls/s by the time a slow rgpu-smi asks.
         "print('up', flush=True)\nimport select\n"
         "while not select.select([sys.stdin], [], [], 0.01)[0]: cu.cuCtxSynchronize()"],
        env={**os.environ, "LD_LIBRARY_PATH": str(BUILD / "lib"), "RGPU_SERVER": server.addr,
             "RGPU_ONEWAY_SYNC": "0", "RGPU_ALLOC_AHEAD": "0"},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        r = run_client([RGPU_SMI, "sessions", "--json"], server)
        assert r.returncode == 0, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        assert doc["server"] == server.addr
        [mine] = [s for s in doc["sessions"] if f"pid={holder.pid} " in s["client"]]
        assert mine["gpu_memory_bytes"] == 32 << 20
        assert mine["calls"] > 100 and mine["calls_per_s"] > 0 and mine["uptime_s"] >= 2 and not mine["self"], mine
        [smi] = [s for s in doc["sessions"] if s["self"]]
        assert "prog=rgpu-smi" in smi["client"]
        r = run_client([RGPU_SMI, "sessions"], server)
        assert any(f"pid={holder.pid} " in l and "32 MiB GPU memory" in l and "calls/s" in l
                   for l in r.stdout.splitlines()), r.stdout
    finally:
        holder.stdin.close()
        holder.wait(10)


def test_wrong_token_gives_a_clear_error():
    s = Server(token="right-token")
    try:
        r = run_client([NVML_TEST], s, token="wrong-token")
        assert r.returncode != 0
        assert "token" in r.stderr.lower(), r.stderr
        assert "Insufficient Permissions" in r.stderr, r.stderr
        r = run_client([RGPU_SMI], s, token="wrong-token")
        assert r.returncode == 1
        assert "cannot use the GPUs of rgpu-server" in r.stderr, r.stderr
        # The right token works.
        r = run_client([NVML_TEST, FAKE_TOTAL_MIB], s, token="right-token")
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        s.stop()


def test_no_server_gives_a_clear_error():
    from conftest import free_port
    r = run_client([RGPU_SMI], f"127.0.0.1:{free_port()}")  # a port nobody listens on
    assert r.returncode == 1
    assert "is the server running?" in r.stderr, r.stderr


def test_server_without_nvml_library_answers_library_not_found(tmp_path):
    s = Server(extra_args=["--nvml", str(tmp_path / "no-such-libnvidia-ml.so")])
    try:
        r = run_client([NVML_TEST], s)
        assert r.returncode != 0
        assert "NVML Shared Library Not Found" in r.stderr, r.stderr
        assert "cannot load NVML" in s.text()
    finally:
        s.stop()


INIT_AND_COUNT = r"""
import ctypes, time
nvml = ctypes.CDLL("libnvidia-ml.so.1")
n = ctypes.c_uint()
for _ in range(5):  # what PyTorch's start-up does
    assert nvml.nvmlInit_v2() == 0
    assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0 and n.value == 1, n.value
for _ in range(4):  # NVML stays initialised until the fifth shutdown
    assert nvml.nvmlShutdown() == 0
assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
assert nvml.nvmlShutdown() == 0
print("after the last shutdown:", nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)))  # 1: NVML_ERROR_UNINITIALIZED
"""


def test_repeated_init_and_count_cost_one_round_trip_each(server):
    r = run_client([sys.executable, "-c", INIT_AND_COUNT], server)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "after the last shutdown: 1" in r.stdout
    # nvmlInit_v2 and nvmlDeviceGetCount_v2 once, the last nvmlShutdown, the refused count.
    deadline = time.time() + 20
    while "ended after" not in server.text() and time.time() < deadline:
        time.sleep(0.05)
    assert "ended after 4 calls" in server.text(), server.text()
