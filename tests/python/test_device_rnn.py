"""LSTM and GRU on rgpu (issue 14, item 2). ATen's LSTM and GRU cells call the fused kernels
_thnn_fused_lstm_cell / _thnn_fused_gru_cell (and their backwards) for rgpu inputs, kernels
torch has only for CUDA: rgpu-opserver --device cpu runs its own (opserver/fused_rnn_cpu.cpp),
--device cuda torch's. Each case runs the same module on the CPU and on rgpu from the same
weights and compares outputs and every gradient."""
import copy

import pytest
from device_fixtures import ON_CUDA, opserver, use_opserver  # noqa: F401,E402  (fixtures; skips without torch)
import torch  # noqa: E402
from torch import nn  # noqa: E402

import rgpu  # noqa: E402

# The GPU sums in other orders than the CPU: looser there (tests/gpu/run.sh runs these on cuda).
TOL = dict(rtol=1e-5, atol=1e-5) if ON_CUDA else dict(rtol=1e-6, atol=1e-6)


def run_both(module, inputs, loss_of):
    """Forward and backward on cpu and on rgpu; compares outputs and gradients."""
    dev_module = copy.deepcopy(module).to("rgpu")
    cpu_in = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    dev_in = [x.detach().to("rgpu").requires_grad_(x.is_floating_point()) for x in inputs]
    cpu_out = module(*cpu_in)
    dev_out = dev_module(*dev_in)
    flat = lambda o: [t for t in (o if isinstance(o, (tuple, list)) else (o,))  # noqa: E731
                      for t in (t if isinstance(t, (tuple, list)) else (t,))]
    for c, d in zip(flat(cpu_out), flat(dev_out)):
        assert d.device.type == "rgpu"
        torch.testing.assert_close(d.cpu(), c, **TOL)
    loss_of(cpu_out).backward()
    loss_of(dev_out).backward()
    for (name, p), q in zip(module.named_parameters(), dev_module.parameters()):
        assert q.grad is not None, f"no gradient for {name} on rgpu"
        torch.testing.assert_close(q.grad.cpu(), p.grad, **TOL, msg=lambda m: f"{name}.grad: {m}")
    for c, d in zip(cpu_in, dev_in):
        assert (c.grad is None) == (d.grad is None)
        if c.grad is not None:
            torch.testing.assert_close(d.grad.cpu(), c.grad, **TOL)


def seq_loss(out):
    y, hidden = out
    h = hidden[0] if isinstance(hidden, tuple) else hidden
    c = hidden[1] if isinstance(hidden, tuple) else 0
    return (y * y).sum() + h.sum() * 0.5 + (c.sum() * 0.25 if torch.is_tensor(c) else 0)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("variant", ["plain", "two_layers_batch_first", "bidirectional", "no_bias"])
def test_rnn_layers(kind, variant):
    torch.manual_seed(0)
    kw = dict(input_size=6, hidden_size=5)
    if variant == "two_layers_batch_first":
        kw.update(num_layers=2, batch_first=True)
    elif variant == "bidirectional":
        kw.update(bidirectional=True)
    elif variant == "no_bias":
        kw.update(bias=False)
    module = getattr(nn, kind)(**kw)
    x = torch.randn(4, 3, 6)
    run_both(module, [x], seq_loss)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_rnn_layers_with_initial_state(kind):
    torch.manual_seed(1)
    module = getattr(nn, kind)(4, 3, num_layers=2)
    x, h0, c0 = torch.randn(5, 2, 4), torch.randn(2, 2, 3), torch.randn(2, 2, 3)

    class WithState(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = module

        def forward(self, x, h0, c0):
            return self.rnn(x, (h0, c0) if kind == "LSTM" else h0)

    run_both(WithState(), [x, h0, c0], seq_loss)


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
@pytest.mark.parametrize("bias", [True, False])
def test_rnn_cells(kind, bias):
    torch.manual_seed(2)
    cell = getattr(nn, kind)(5, 4, bias=bias)

    class Unrolled(nn.Module):
        """Three steps of the cell, the state fed back, as a hand-written RNN does."""

        def __init__(self):
            super().__init__()
            self.cell = cell

        def forward(self, xs):
            state, outs = None, []
            for x in xs:
                state = self.cell(x, state)
                outs.append(state[0] if isinstance(state, tuple) else state)
            return torch.stack(outs), state

    run_both(Unrolled(), [torch.randn(3, 2, 5)], seq_loss)


def test_only_the_cell_state_gets_a_gradient():
    """The LSTM backward with grad_hy undefined (only cy is used), which the fused backward handles apart."""
    torch.manual_seed(3)
    cell = nn.LSTMCell(3, 2)
    run_both(cell, [torch.randn(4, 3)], lambda out: (out[1] * out[1]).sum())


def test_half_precision_lstm_cell_runs():
    """float16: the server's kernels take the inputs' dtype (as CUDA's do)."""
    torch.manual_seed(4)
    cell = nn.LSTMCell(3, 2).half()
    x = torch.randn(4, 3).half()
    cpu_cell = nn.LSTMCell(3, 2)
    cpu_cell.load_state_dict({k: v.float().cpu() for k, v in cell.state_dict().items()})
    ref_h, ref_c = cpu_cell(x.float())
    h, c = cell.to("rgpu")(x.to("rgpu"))
    assert h.dtype == torch.float16
    torch.testing.assert_close(h.cpu().float(), ref_h, rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(c.cpu().float(), ref_c, rtol=2e-3, atol=2e-3)


def test_gru_steps_do_not_wait():
    """The fused GRU cell has a meta kernel on the client (aten/fused_rnn_meta.cpp): a training
    step of a GRU posts its ops, none waits for the server on its own."""
    torch.manual_seed(5)
    model = nn.GRU(4, 3, num_layers=2).to("rgpu")
    x = torch.randn(6, 2, 4).to("rgpu")
    for _ in range(2):  # the second step finds its plans in the meta cache
        rgpu.synchronize()
        before = rgpu.stats()["waits_by_reason"]
        y, h = model(x)
        (y.sum() + h.sum()).backward()
        after = rgpu.stats()["waits_by_reason"]
    grew = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    assert not grew, f"a GRU step waited for the server: {grew}"
