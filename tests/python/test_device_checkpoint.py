"""Checkpoints and bulk copies on rgpu (issue 14, items 8 and 9): torch.save of a state_dict (of a
model, of an optimizer) and `{k: v.cpu()}` wait for the server at most twice in all, not once per
tensor (python/rgpu/checkpoint.py, runtime/readahead.h, kTorchReadMany); the checkpoints load
back bit-exactly onto rgpu and onto the cpu; host copies of device bytes are never served once
the device bytes may have changed; large copies (several frames each way, read and written in
place) arrive exact. bench/torch_bench.py measures the bandwidth and the waits per save."""
import io

from device_fixtures import opserver, use_opserver  # noqa: F401,E402  (fixtures; skips without torch)
import torch  # noqa: E402

import rgpu  # noqa: E402

D = "rgpu"


def mlp(layers=4, width=32):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.LayerNorm(width)]
    return torch.nn.Sequential(*mods)


def waits():
    return rgpu.stats()["waits"]


def saved(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def test_saving_a_state_dict_waits_at_most_twice_and_loads_back_exactly():
    ref = mlp()
    model = mlp().to(D)
    rgpu.synchronize()
    before = waits()
    buf = saved(model.state_dict())
    assert waits() - before <= 2
    for where in ("cpu", D):
        buf.seek(0)
        sd = torch.load(buf, map_location=where)
        assert list(sd) == list(ref.state_dict())
        for k, v in ref.state_dict().items():
            assert sd[k].device.type == where
            assert torch.equal(sd[k].cpu(), v), k


def test_copying_a_state_dict_to_the_cpu_waits_at_most_twice():
    model = mlp().to(D)
    rgpu.synchronize()
    before = waits()
    host = {k: v.cpu() for k, v in model.state_dict().items()}
    assert waits() - before <= 2
    for k, v in mlp().state_dict().items():
        assert torch.equal(host[k], v), k


def test_saving_an_optimizer_state_dict_waits_at_most_twice_and_loads_back_exactly():
    model = mlp().to(D)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.ones(3, 32, device=D)).sum().backward()
    opt.step()
    rgpu.synchronize()
    before = waits()
    buf = saved(opt.state_dict())
    assert waits() - before <= 2
    state = {k: {n: t.cpu() for n, t in v.items()} for k, v in opt.state_dict()["state"].items()}
    back = torch.load(buf, map_location="cpu")
    for k, v in state.items():
        for n, t in v.items():
            assert torch.equal(back["state"][k][n], t), (k, n)


def test_a_copy_read_ahead_is_not_served_after_the_device_bytes_change():
    model = mlp(2).to(D)
    sd = model.state_dict()  # announces every tensor's storage
    first = sd["0.weight"].cpu()  # fetches the batch
    with torch.no_grad():
        model[0].bias.add_(1)
    assert torch.equal(sd["0.bias"].cpu(), mlp(2)[0].bias.detach() + 1)
    assert torch.equal(first, mlp(2)[0].weight.detach())


def test_views_of_announced_storages_read_their_own_elements():
    base = torch.arange(64, dtype=torch.float32)
    x = base.to(D)
    sd = {"t": x[8:24].view(4, 4).t(), "s": x[1::3], "whole": x}
    torch.ops.rgpu.announce_reads(list(sd.values()))
    before = waits()
    host = {k: v.cpu() for k, v in sd.items()}
    assert waits() - before == 1
    assert torch.equal(host["t"], base[8:24].view(4, 4).t())
    assert torch.equal(host["s"], base[1::3])
    assert torch.equal(host["whole"], base)


def test_a_storage_freed_after_its_announcement_is_skipped():
    a, b = torch.ones(8).to(D), torch.full((8,), 2.0).to(D)
    torch.ops.rgpu.announce_reads([a, b])
    del a
    assert torch.equal(b.cpu(), torch.full((8,), 2.0))


def test_large_copies_arrive_exact_both_ways():
    # 24 MiB: several frames each way, the server writing in place and the client reading in place.
    src = torch.randint(-(2 ** 31), 2 ** 31 - 1, (6 << 20,), dtype=torch.int32)
    dev = src.to(D)
    assert torch.equal(dev.cpu(), src)
    # Into a cpu tensor the bytes cannot go straight into (a strided destination, another dtype).
    out = torch.zeros(2, 6 << 20, dtype=torch.int32)[:, ::2]
    out.copy_(dev.view(2, 3 << 20))
    assert torch.equal(out, src.view(2, 3 << 20))
    assert torch.equal(dev.to(torch.float64).cpu(), src.to(torch.float64))
    # Into a strided rgpu destination (the server gathers the chunks, then copies).
    big = torch.zeros(2, 6 << 20, dtype=torch.int32, device=D)
    big[:, ::2] = src.view(2, 3 << 20)
    assert torch.equal(big.cpu()[:, ::2], src.view(2, 3 << 20))


def test_large_uploads_of_odd_sizes_behind_many_storage_changes_arrive_exact():
    # The server reads a large write's head, then its bytes straight into the tensor: a last
    # chunk of odd length, and a head holding thousands of frees in front of the bytes
    # (protocol/torch_wire.h kWriteHeadBytes), must land byte for byte, and what follows decode.
    g = torch.Generator().manual_seed(5)
    for n in ((9 << 20) + 7, (1 << 17) + 1, (1 << 15) - 3):
        src = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)
        small = [torch.ones(4, device=D) for _ in range(3000)]
        del small  # 3000 frees wait for the next frame: the upload's
        dev = src.to(D)
        assert torch.equal(dev.cpu(), src)
        assert int((dev.to(torch.int64) + 1).sum()) == int(src.to(torch.int64).sum()) + n
