"""Parameters keep their identity across devices (issue 14, item 1): nn.Module._apply assigns
.data when torch._has_compatible_shallow_copy_type says the old and new tensors are compatible,
and makes a new Parameter per module otherwise, which unties weights that modules share (GPT-2's
tied embeddings, a submodule used twice). rgpu answers that question for its tensors
(aten/kernels.cpp, has_compatible_shallow_copy_type), so .to("rgpu"), .to("cpu"), .to(dtype),
load_state_dict and optimizers built before or after the move see the same Parameter objects
as on cpu and cuda."""
import copy

import pytest
from device_fixtures import opserver, use_opserver  # noqa: F401,E402  (fixtures; skips without torch)
import torch  # noqa: E402

import rgpu  # noqa: F401,E402

D = "rgpu"


class Tied(torch.nn.Module):
    """An embedding whose output layer shares its weight, as GPT-2 ties them."""

    def __init__(self, v=11, c=6):
        super().__init__()
        self.emb = torch.nn.Embedding(v, c)
        self.mid = torch.nn.Linear(c, c)
        self.out = torch.nn.Linear(c, v, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, idx):
        return self.out(torch.tanh(self.mid(self.emb(idx))))


def ids(model):
    return [id(p) for p in model.parameters()]


def test_compatible_shallow_copy_type_between_cpu_and_rgpu():
    cpu, dev = torch.ones(2), torch.ones(2, device=D)
    assert torch._has_compatible_shallow_copy_type(cpu, dev)
    assert torch._has_compatible_shallow_copy_type(dev, cpu)
    assert torch._has_compatible_shallow_copy_type(dev, dev.double())
    # Sparse tensors keep torch's answer: their metadata is not a dense tensor's.
    assert not torch._has_compatible_shallow_copy_type(dev, torch.ones(2).to_sparse())


@pytest.mark.parametrize("move", [
    lambda m: m.to(D), lambda m: m.rgpu(), lambda m: m.to(torch.device(D, 0)),
    lambda m: m.to(D).to("cpu"), lambda m: m.to(D).cpu(), lambda m: m.to(D).to(torch.float64),
    lambda m: m.to(D, torch.float64), lambda m: m.to(D).half().float(), lambda m: m.to(D).to(D),
], ids=["to", "rgpu()", "device", "and_back", "cpu()", "to_dtype", "to_device_dtype", "half_float", "twice"])
def test_moves_keep_every_parameter_and_the_tie(move):
    m = Tied()
    before = ids(m)
    n = sum(p.numel() for p in m.parameters())
    move(m)
    assert ids(m) == before
    assert m.out.weight is m.emb.weight
    assert len(list(m.parameters())) == 3
    assert sum(p.numel() for p in m.parameters()) == n


def test_named_parameters_and_state_dict_as_on_cpu():
    cpu = Tied()
    dev = copy.deepcopy(cpu).to(D)
    assert [k for k, _ in dev.named_parameters()] == [k for k, _ in cpu.named_parameters()]
    assert list(dev.state_dict()) == list(cpu.state_dict())
    sd = dev.state_dict()
    # The tied entries are one storage, as torch.save writes them once.
    assert sd["out.weight"].untyped_storage().data_ptr() == sd["emb.weight"].untyped_storage().data_ptr()


def test_the_shared_weight_gets_both_gradients():
    torch.manual_seed(0)
    cpu = Tied()
    dev = copy.deepcopy(cpu).to(D)
    idx = torch.randint(0, 11, (4, 5))
    for m, x in ((cpu, idx), (dev, idx.to(D))):
        m(x).square().mean().backward()
    torch.testing.assert_close(dev.emb.weight.grad.cpu(), cpu.emb.weight.grad, rtol=1e-6, atol=1e-7)
    assert dev.out.weight.grad is dev.emb.weight.grad


def test_gradients_move_with_their_parameters():
    m = Tied()
    m(torch.tensor([[1, 2]])).sum().backward()
    grad = m.mid.weight.grad
    values = grad.clone()
    m.to(D)
    assert m.mid.weight.grad is grad and grad.device.type == D
    torch.testing.assert_close(grad.cpu(), values)
    m.to("cpu")
    assert m.mid.weight.grad is grad and grad.device.type == "cpu"


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_optimizer_built_before_or_after_the_move_trains_the_model(when):
    torch.manual_seed(0)
    ref = Tied()
    m = copy.deepcopy(ref)
    idx = torch.randint(0, 11, (3, 4))
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.05)
    if when == "before":
        opt = torch.optim.AdamW(m.parameters(), lr=0.05)
        m.to(D)
    else:
        m.to(D)
        opt = torch.optim.AdamW(m.parameters(), lr=0.05)
    assert [id(p) for p in opt.param_groups[0]["params"]] == ids(m)
    for model, o, x in ((ref, ref_opt, idx), (m, opt, idx.to(D))):
        for _ in range(3):
            o.zero_grad()
            model(x).square().mean().backward()
            o.step()
    for a, b in zip(ref.parameters(), m.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)
    assert m.out.weight is m.emb.weight


def test_load_state_dict_keeps_identity_and_tie():
    src = Tied()
    m = Tied().to(D)
    before = ids(m)
    m.load_state_dict(src.state_dict())
    assert ids(m) == before and m.out.weight is m.emb.weight
    for a, b in zip(src.parameters(), m.parameters()):
        assert b.device.type == D
        torch.testing.assert_close(b.detach().cpu(), a.detach())
    # And the other way: an rgpu state_dict into a cpu model.
    back = Tied()
    back.load_state_dict(m.state_dict())
    for a, b in zip(src.parameters(), back.parameters()):
        torch.testing.assert_close(b.detach(), a.detach())


def test_a_submodule_used_twice_stays_one_module():
    block = torch.nn.Linear(4, 4)
    m = torch.nn.Sequential(block, torch.nn.ReLU(), block)
    before = ids(m)
    m.to(D)
    assert ids(m) == before and m[0].weight is m[2].weight
    assert len(list(m.parameters())) == 2


def test_a_parameter_after_the_move_is_still_a_leaf_that_trains():
    m = torch.nn.Linear(3, 2)
    w = m.weight
    m.to(D)
    assert isinstance(w, torch.nn.Parameter) and w.is_leaf and w.requires_grad
    m(torch.ones(1, 3, device=D)).sum().backward()
    assert w.grad is not None and w.grad.device.type == D
