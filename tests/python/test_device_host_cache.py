"""The host cache of `.cpu()` results (issue 14, item 9; python/rgpu/csrc/runtime/host_cache.cpp):
a freed result of 1 MiB or more is kept, and the next `.cpu()` of its size lands in the same,
already touched memory; what comes back is the new tensor's values, never the old one's. The
results are plain CPU tensors (autograd, resize_, numpy), RGPU_HOST_CACHE_MB=0 turns the cache off
and torch.rgpu.empty_cache() frees what it keeps."""
import pytest
from device_fixtures import opserver, run_python, use_opserver  # noqa: F401,E402  (fixtures; skips without torch)
import torch  # noqa: E402

import rgpu  # noqa: E402,F401

D = "rgpu"
MIB_OF_FLOATS = (1 << 20) // 4


def host_cache():
    kept, reused = torch.ops.rgpu.host_cache()
    return kept, reused


def test_a_second_cpu_of_that_size_reuses_the_first_ones_memory_with_its_own_values():
    a = torch.arange(4 * MIB_OF_FLOATS, dtype=torch.float32, device=D)
    b = a * 2
    first = a.cpu()
    address = first.data_ptr()
    assert torch.equal(first, torch.arange(4 * MIB_OF_FLOATS, dtype=torch.float32))
    _, reused = host_cache()
    del first
    assert host_cache()[0] >= 4 << 20  # kept
    second = b.cpu()
    assert second.data_ptr() == address
    assert host_cache()[1] == reused + 1
    assert torch.equal(second, torch.arange(4 * MIB_OF_FLOATS, dtype=torch.float32) * 2)


def test_results_are_ordinary_cpu_tensors():
    x = torch.randn(MIB_OF_FLOATS, device=D, requires_grad=True)
    y = x.cpu()
    assert y.device.type == "cpu" and y.requires_grad and not y.is_pinned()
    (y * 3).sum().backward()
    assert torch.equal(x.grad.cpu(), torch.full((MIB_OF_FLOATS,), 3.0))
    z = x.detach().cpu()
    z.resize_(2 * MIB_OF_FLOATS)  # grows through the storage's allocator
    assert torch.equal(z[:MIB_OF_FLOATS], x.detach().cpu())
    assert z.numpy().shape == (2 * MIB_OF_FLOATS,)


@pytest.mark.parametrize("convert", [lambda t: t.to("cpu", torch.float64), lambda t: t.transpose(1, 3).cpu(),
                                     lambda t: t.to("cpu", memory_format=torch.channels_last)],
                         ids=["dtype", "transposed", "channels_last"])
def test_other_copies_to_the_cpu_are_unchanged(convert):
    x = torch.randn(8, 4, 128, 256, device=D)
    expected = convert(x.cpu())
    got = convert(x)
    assert got.dtype == expected.dtype and got.stride() == expected.stride()
    assert torch.equal(got, expected)


def test_small_results_do_not_enter_the_cache():
    kept, reused = host_cache()
    for _ in range(3):
        torch.ones(1000, device=D).cpu()
    assert host_cache() == (kept, reused)


def test_empty_cache_frees_what_is_kept():
    torch.ones(2 * MIB_OF_FLOATS, device=D).cpu()  # freed at once: kept
    assert host_cache()[0] > 0
    torch.rgpu.empty_cache()
    assert host_cache()[0] == 0


def test_zero_turns_it_off(opserver):
    r = run_python("""
import torch, rgpu
x = torch.ones(2 << 20, device="rgpu")
for _ in range(3):
    assert x.cpu().sum().item() == 2 << 20
print("cache", list(torch.ops.rgpu.host_cache()))
""", env_extra={"RGPU_HOST_CACHE_MB": "0"})
    assert r.returncode == 0, r.stderr
    assert "cache [0, 0]" in r.stdout
