"""Pinned memory on rgpu (issue 14, item 7): Tensor.pin_memory(), DataLoader(pin_memory=True) and
pin_memory_device="rgpu" give pinned tensors (is_pinned() used to be False), and non-blocking
uploads from them do not wait for the server: compute queued behind an upload goes out with it,
and the one wait of the loop is the read of its result (rgpu.stats())."""
import pytest
from device_fixtures import opserver, use_opserver  # noqa: F401,E402  (fixtures; skips without torch)
import torch  # noqa: E402

import rgpu  # noqa: E402

D = "rgpu"


def test_pin_memory_gives_a_pinned_tensor_with_the_same_values():
    x = torch.randn(64, 32)
    p = x.pin_memory()
    assert p.is_pinned() and not x.is_pinned()
    assert torch.equal(p, x)
    assert p[3:].is_pinned()  # a view into pinned memory is pinned too
    assert torch.empty(10, pin_memory=True).is_pinned()
    assert not torch.empty(10).is_pinned()


def test_pin_memory_with_the_device_named():
    with pytest.warns(Warning):  # torch deprecates the argument, but it still pins
        p = torch.ones(4).pin_memory(D)
    assert p.is_pinned()


@pytest.mark.parametrize("kwargs", [{"pin_memory": True}, {"pin_memory": True, "pin_memory_device": D}],
                         ids=["pin_memory", "pin_memory_device"])
def test_dataloader_pins_its_batches(kwargs):
    data = torch.utils.data.TensorDataset(torch.randn(12, 3), torch.arange(12))
    loader = torch.utils.data.DataLoader(data, batch_size=4, **kwargs)
    n = 0
    for x, y in loader:
        assert x.is_pinned() and y.is_pinned()
        assert torch.equal(x.to(D, non_blocking=True).cpu(), x)
        n += 1
    assert n == 3


def test_pinned_non_blocking_uploads_do_not_wait_and_overlap_with_compute():
    torch.manual_seed(0)
    w = torch.randn(64, 64, device=D)
    batches = [torch.randn(32, 64).pin_memory() for _ in range(8)]
    expect = sum((b @ w.cpu()).relu().sum() for b in batches)
    total = torch.zeros((), device=D)
    torch.rgpu.synchronize()
    before = rgpu.stats()
    for b in batches:
        # The upload and the compute on it are queued together: nothing waits for the server.
        total += (b.to(D, non_blocking=True) @ w).relu().sum()
    mid = rgpu.stats()
    assert mid["waits"] == before["waits"]
    assert mid["posts"] > before["posts"]
    got = total.item()
    assert rgpu.stats()["waits"] == before["waits"] + 1
    assert got == pytest.approx(expect.item(), rel=1e-4)
