"""torch.rgpu, the torch.cuda surface of the device (issue 14, item 5): each function with
torch.cuda's name and meaning, against rgpu-opserver --device cpu (and --device cuda on the GPU
machine, where the answers are the GPU's), and torch.accelerator's functions on top of the
backend's DeviceAllocator. What waits for the server is counted with rgpu.stats()."""
import collections
import os

import pytest
from device_fixtures import ON_CUDA, opserver, run_python, use_opserver  # noqa: F401,E402
import torch  # noqa: E402

import rgpu  # noqa: E402

R = torch.rgpu
D = "rgpu"
MiB = 1 << 20


def waits(reason=None):
    s = rgpu.stats()
    return s["waits"] if reason is None else s["waits_by_reason"].get(reason, 0)


# --- availability -------------------------------------------------------------------------------

def test_is_available_and_initialized_when_a_server_answers():
    assert R.is_available()
    assert R.is_initialized()
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator().type == D


def test_is_available_is_false_without_a_server_and_raises_nothing(tmp_path):
    p = run_python("import torch, rgpu; print(torch.rgpu.is_available(), torch.rgpu.is_initialized(), "
                   "torch.accelerator.is_available())",
                   env_extra={"RGPU_OPSERVER": "127.0.0.1:1", "RGPU_CONNECT_TIMEOUT": "2"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "False", "False"]
    assert p.stderr.strip() == ""


def test_device_count_current_device_and_the_device_context():
    assert R.device_count() == 1 and R.current_device() == 0
    with R.device(0):
        assert R.current_device() == 0
    with R.device_of(torch.ones(1, device=D)):
        assert R.current_device() == 0


# --- memory -------------------------------------------------------------------------------------

def test_memory_allocated_counts_live_storages_without_waiting():
    R.synchronize()
    base = R.memory_allocated()
    before = waits()
    x = torch.empty(MiB, dtype=torch.uint8, device=D)
    y = x.float()  # an op's output: its storage id was minted by the fallback
    assert R.memory_allocated() == base + MiB + 4 * MiB
    assert R.memory_allocated(0) == R.memory_allocated("rgpu:0") == R.memory_allocated(torch.device(D))
    del y
    assert R.memory_allocated() == base + MiB
    del x
    assert R.memory_allocated() == base
    assert waits() == before  # all of it counted on the client


def test_max_memory_allocated_and_reset_peak_memory_stats():
    R.reset_peak_memory_stats()
    base = R.memory_allocated()
    assert R.max_memory_allocated() == base
    x = torch.empty(3 * MiB, dtype=torch.uint8, device=D)
    del x
    assert R.max_memory_allocated() == base + 3 * MiB
    R.reset_peak_memory_stats()
    assert R.max_memory_allocated() == base
    R.reset_max_memory_allocated()
    R.reset_accumulated_memory_stats()
    assert R.memory_stats()["allocated_bytes.all.allocated"] == 0


def test_a_resized_storage_counts_its_new_size():
    base = R.memory_allocated()
    x = torch.empty(10, device=D)
    x.resize_(1000)
    assert R.memory_allocated() == base + 4000
    del x
    assert R.memory_allocated() == base


def test_memory_stats_has_torch_cudas_keys_and_pools():
    x = torch.empty(2 * MiB, dtype=torch.uint8, device=D)  # large pool (>= 1 MiB)
    y = torch.empty(100, dtype=torch.uint8, device=D)      # small pool
    st = R.memory_stats()
    assert isinstance(st, collections.OrderedDict)
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "allocation.all.current",
                "reserved_bytes.all.current", "active_bytes.all.current", "segment.all.current",
                "num_ooms", "num_alloc_retries"):
        assert key in st, key
    # (Not compared with a second memory_allocated(): tensors of earlier tests may be freed between.)
    assert st["allocated_bytes.all.current"] >= 2 * MiB + 100
    assert st["allocated_bytes.large_pool.current"] >= 2 * MiB
    assert st["allocated_bytes.small_pool.current"] >= 100
    assert st["allocated_bytes.all.current"] == (st["allocated_bytes.large_pool.current"]
                                                 + st["allocated_bytes.small_pool.current"])
    del x, y


def test_memory_reserved_covers_what_is_allocated():
    x = torch.ones(MiB, device=D)
    R.synchronize()
    assert R.memory_reserved() >= R.memory_allocated() >= 4 * MiB
    assert R.max_memory_reserved() >= R.memory_reserved()
    if not ON_CUDA:
        # A cpu server has no cache: it reserves what was allocated, and nobody waits to say so.
        before = waits()
        assert R.memory_reserved() == R.memory_allocated()
        assert waits() == before
    del x


def test_torch_accelerator_memory_functions_work():
    # They used to end in INTERNAL ASSERT FAILED (c10/core/CachingDeviceAllocator.h): the
    # allocator was not a DeviceAllocator.
    x = torch.ones(1000, device=D)
    assert torch.accelerator.memory_allocated() == R.memory_allocated()
    assert torch.accelerator.max_memory_allocated() >= torch.accelerator.memory_allocated()
    assert torch.accelerator.memory_reserved() >= torch.accelerator.memory_allocated()
    assert torch.accelerator.memory_stats()["allocated_bytes.all.current"] == R.memory_allocated()
    torch.accelerator.reset_peak_memory_stats()
    torch.accelerator.empty_cache()
    free, total = torch.accelerator.get_memory_info()
    assert 0 < free <= total
    del x


def test_empty_cache_is_one_way():
    torch.ones(10, device=D)
    before = waits()
    R.empty_cache()
    assert waits() == before
    R.synchronize()  # and the server took it


def test_mem_get_info_is_the_devices_memory():
    free, total = R.mem_get_info()
    assert 0 < free <= total
    assert total == R.get_device_properties().total_memory
    assert R.mem_get_info(0) == pytest.approx((free, total), rel=0.5)


# --- properties ---------------------------------------------------------------------------------

def test_get_device_properties_is_asked_once():
    before = waits("get_device_properties")
    p = R.get_device_properties()
    assert p is R.get_device_properties(0) is R.get_device_properties("rgpu:0")
    assert waits("get_device_properties") - before <= 1
    R.get_device_name()
    R.get_device_capability()
    assert waits("get_device_properties") - before <= 1
    assert isinstance(p.name, str) and p.name
    assert p.total_memory > 0 and p.multi_processor_count > 0
    assert "total_memory" in repr(p)
    if ON_CUDA:
        assert p.major >= 3 and p.warp_size == 32 and p.uuid.startswith("GPU-")
    else:
        assert "rgpu-opserver --device cpu" in p.name and (p.major, p.minor) == (0, 0)


def test_get_device_name_and_capability_agree_with_the_properties():
    p = R.get_device_properties()
    assert R.get_device_name() == p.name
    assert R.get_device_capability() == (p.major, p.minor)


def test_a_device_the_server_lacks_is_refused_clearly():
    with pytest.raises(RuntimeError, match="device 5 does not exist"):
        R.get_device_properties(5)
    R.synchronize()  # the connection lives on


# --- streams, events, synchronize ---------------------------------------------------------------

def test_streams_are_the_devices_one_stream():
    s = R.Stream()
    assert isinstance(s, torch.Stream) and s.device == torch.device(D, 0)
    assert R.current_stream() == R.default_stream() == torch.accelerator.current_stream()
    with R.stream(s) as entered:
        assert entered is None  # torch.cuda.stream yields nothing either
        y = torch.ones(3, device=D) * 2
    with R.StreamContext(s) as entered:
        assert entered is s
    with R.stream(None):
        pass
    R.set_stream(s)
    s.wait_stream(R.current_stream())
    assert s.query()
    s.synchronize()
    assert y.sum().item() == 6


def test_events_record_wait_and_synchronize():
    e = R.Event()
    assert isinstance(e, R.Event) and isinstance(e, torch.Event)
    e.record()
    R.current_stream().wait_event(e)
    e.wait()
    assert e.query()
    e.synchronize()


def test_event_elapsed_time_measures_the_servers_work():
    a, b, c = R.Event(enable_timing=True), R.Event(enable_timing=True), R.Event(enable_timing=True)
    w = torch.randn(400, 400, device=D)
    a.record()
    b.record()
    for _ in range(30):
        w = torch.tanh(w @ w)
    c.record()
    c.synchronize()
    nothing, work = a.elapsed_time(b), a.elapsed_time(c)
    assert 0 <= nothing < work
    assert b.elapsed_time(c) == pytest.approx(work - nothing, rel=0.05, abs=0.5)


def test_elapsed_time_without_timing_says_why():
    a, b = R.Event(), R.Event()
    a.record()
    b.record()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing=True"):
        a.elapsed_time(b)


def test_synchronize_waits_and_raises_deferred_errors():
    before = waits("synchronize")
    R.synchronize()
    R.synchronize(0)
    assert waits("synchronize") - before == 2


# --- random numbers -----------------------------------------------------------------------------

def test_get_and_set_rng_state_replay_the_same_numbers():
    torch.manual_seed(11)
    state = R.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.rand(5, device=D).cpu()
    R.set_rng_state(state)
    b = torch.rand(5, device=D).cpu()
    assert torch.equal(a, b)
    states = R.get_rng_state_all()
    assert len(states) == R.device_count()
    c = torch.randn(4, device=D).cpu()
    R.set_rng_state_all(states)
    assert torch.equal(torch.randn(4, device=D).cpu(), c)


def test_set_rng_state_refuses_what_is_not_a_state():
    with pytest.raises(RuntimeError, match="ByteTensor"):
        R.set_rng_state(torch.zeros(3))
    R.set_rng_state(torch.zeros(3, dtype=torch.uint8))  # one-way: the server's refusal comes later
    with pytest.raises(RuntimeError, match=r"set_rng_state failed on rgpu-opserver(.|\n)*surfaced at the next"):
        R.synchronize()


def test_manual_seed_initial_seed_and_seed():
    R.manual_seed(1234)
    assert R.initial_seed() == 1234
    a = torch.rand(3, device=D).cpu()
    R.manual_seed_all(1234)
    assert torch.equal(torch.rand(3, device=D).cpu(), a)
    torch.manual_seed(99)
    assert R.initial_seed() == 99
    R.seed()
    s1 = R.initial_seed()
    R.seed_all()
    assert R.initial_seed() != s1 or R.initial_seed() != 99


def test_torch_cuda_style_names_all_exist():
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                 "memory_stats", "reset_peak_memory_stats", "empty_cache", "mem_get_info",
                 "get_device_name", "get_device_properties", "get_device_capability", "Stream", "Event",
                 "current_stream", "default_stream", "stream", "synchronize", "get_rng_state", "set_rng_state",
                 "get_rng_state_all", "set_rng_state_all", "seed", "seed_all", "initial_seed", "manual_seed",
                 "manual_seed_all", "is_available", "is_initialized", "device_count", "current_device",
                 "set_device", "device"):
        assert callable(getattr(R, name)), name
        assert hasattr(torch.cuda, name), name  # the same names as torch.cuda's
