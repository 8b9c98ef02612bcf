"""Several GPUs on one rgpu-server (the fake driver presents RGPU_FAKE_DEVICES of them): the
program sees every one, CUDA_VISIBLE_DEVICES selects and orders them on the client, peer access
and copies between devices run on the server as the driver runs them, and the NVML shim lists
every GPU with their P2P status (what NCCL's init asks)."""
import pytest

from conftest import BUILD, Server, run_client

MULTI_GPU_TEST = str(BUILD / "bin/multi_gpu_test")
RGPU_SMI = str(BUILD / "bin/rgpu-smi")
NVML_SHIM = str(BUILD / "lib/libnvidia-ml.so.1")
UUID_PREFIX = "GPU-72677075-2d66-616b-652d-4832303000"  # the fake's, device i ends in i + 1


@pytest.fixture(scope="module")
def three_gpus():
    s = Server(env={"RGPU_FAKE_DEVICES": "3"})
    yield s
    s.stop()


def facts(stdout):
    return [line for line in stdout.splitlines() if line.split(" ")[0] in ("count", "device", "peer", "enable")]


def test_every_gpu_of_the_server_is_a_device_with_its_peers(three_gpus):
    r = run_client([MULTI_GPU_TEST, "12345", str((4 << 20) + 1)], three_gpus)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "MULTI GPU TEST PASSED" in r.stdout
    out = facts(r.stdout)
    assert out[:4] == ["count 3",
                       "device 0 uuid-last=01 bus=0000:1B:00.0 name=NVIDIA H200 (rgpu fake)",
                       "device 1 uuid-last=02 bus=0000:2B:00.0 name=NVIDIA H200 (rgpu fake)",
                       "device 2 uuid-last=03 bus=0000:3B:00.0 name=NVIDIA H200 (rgpu fake)"]
    for a in range(3):
        for b in range(3):
            assert f"peer {a} {b} = {int(a != b)}" in out
    assert "enable 0 2 = CUDA_SUCCESS" in out
    assert "copies 12345 ok" in r.stdout and f"copies {(4 << 20) + 1} ok" in r.stdout
    assert "vmm 0 2 ok" in r.stdout


def test_cuda_visible_devices_selects_and_orders_on_the_client(three_gpus):
    r = run_client([MULTI_GPU_TEST, "777"], three_gpus, env_extra={"CUDA_VISIBLE_DEVICES": "2,0"})
    assert r.returncode == 0, r.stdout + r.stderr
    out = facts(r.stdout)
    assert out[:3] == ["count 2",
                       "device 0 uuid-last=03 bus=0000:3B:00.0 name=NVIDIA H200 (rgpu fake)",
                       "device 1 uuid-last=01 bus=0000:1B:00.0 name=NVIDIA H200 (rgpu fake)"]
    # By UUID prefix too, as the driver accepts it.
    r = run_client([MULTI_GPU_TEST, "5"], three_gpus,
                   env_extra={"CUDA_VISIBLE_DEVICES": f"{UUID_PREFIX}02,{UUID_PREFIX}01"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert facts(r.stdout)[1].startswith("device 0 uuid-last=02")


def test_rgpu_smi_lists_every_gpu(three_gpus):
    r = run_client([RGPU_SMI], three_gpus)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "GPUs:        3" in r.stdout
    for i in range(3):
        assert f"GPU {i}: NVIDIA H200 (rgpu fake) ({UUID_PREFIX}0{i + 1})" in r.stdout


NVML_P2P = """import ctypes, os, sys
nv = ctypes.CDLL(os.environ["NVML"])
assert nv.nvmlInit_v2() == 0
n = ctypes.c_uint()
assert nv.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
print("count", n.value)
h = [ctypes.c_void_p() for _ in range(n.value)]
for i in range(n.value):
    assert nv.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h[i])) == 0
    uuid = ctypes.create_string_buffer(96)
    assert nv.nvmlDeviceGetUUID(h[i], uuid, 96) == 0
    index = ctypes.c_uint()
    assert nv.nvmlDeviceGetIndex(h[i], ctypes.byref(index)) == 0
    print("gpu", i, index.value, uuid.value.decode())
for a in range(n.value):
    for b in range(n.value):
        st = ctypes.c_int(-1)
        rc = nv.nvmlDeviceGetP2PStatus(h[a], h[b], 0, ctypes.byref(st))  # NVML_P2P_CAPS_INDEX_READ
        print("p2p", a, b, rc, st.value)
"""


def test_nvml_shim_lists_every_gpu_and_their_p2p_status(three_gpus, tmp_path):
    script = tmp_path / "nvml_p2p.py"
    script.write_text(NVML_P2P)
    r = run_client(["python3", str(script)], three_gpus, env_extra={"NVML": NVML_SHIM})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "count 3" in lines
    for i in range(3):
        assert f"gpu {i} {i} {UUID_PREFIX}0{i + 1}" in lines
    for a in range(3):
        for b in range(3):
            # NVML_P2P_STATUS_OK (0) between two GPUs; NOT_SUPPORTED (5) for a GPU with itself.
            assert f"p2p {a} {b} 0 {0 if a != b else 5}" in lines, r.stdout
