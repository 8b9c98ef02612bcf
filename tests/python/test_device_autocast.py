"""Autocast and GradScaler on rgpu (issue 14, item 3): torch.autocast("rgpu", dtype) casts the
same ops to the same dtypes as autocast on cuda (python/rgpu/csrc/aten/autocast.cpp registers
torch's CUDA lists for AutocastPrivateUse1), and torch.amp.GradScaler("rgpu") scales, unscales,
skips steps with inf/nan gradients and updates its scale as on cpu."""
import os
import re

import pytest
from device_fixtures import ON_CUDA, opserver, use_opserver  # noqa: F401,E402  (fixtures; skips without torch)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import rgpu  # noqa: F401,E402  (registers the device)

HEADER = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "autocast_mode.h")
LOW = (torch.bfloat16, torch.float16)


def autocast_ops(key):
    names = torch._C._dispatch_get_all_op_names()
    return {n for n in names if torch._C._dispatch_has_kernel_for_dispatch_key(n, key)}


def test_autocast_covers_the_ops_of_cuda_autocast():
    """Op by op: an op has an autocast kernel on rgpu exactly when it has one on cuda (torch's
    CUDA kernels are registered in libtorch_cpu, so the cuda side is known without a GPU)."""
    cuda, rgpu_ops = autocast_ops("AutocastCUDA"), autocast_ops("AutocastPrivateUse1")
    # cudnn's own RNN op, which torch casts for cuda (and reflattens its weights) in
    # cudnn/AutocastRNN.cpp: ATen never picks it for rgpu tensors (its LSTM and GRU run the
    # fused cells, which are cast), so rgpu has no kernel to register for it.
    cuda.discard("aten::_cudnn_rnn")
    assert len(cuda) > 100, f"torch registers only {len(cuda)} AutocastCUDA kernels; is this torch built oddly?"
    assert cuda - rgpu_ops == set(), "cast on cuda, not on rgpu"
    assert rgpu_ops - cuda == set(), "cast on rgpu, not on cuda"


def header_lists():
    """The policy lists of ATen/autocast_mode.h (what torch's AutocastCUDA registration expands),
    as {"aten::op" or "aten::op.overload": policy}."""
    text = open(HEADER).read()
    policies = {}
    for macro, policy in (("AT_FORALL_LOWER_PRECISION_FP", "lower_precision_fp"), ("AT_FORALL_FP32", "fp32"),
                          ("AT_FORALL_FP32_SET_OPT_DTYPE", "fp32_set_opt_dtype"), ("AT_FORALL_PROMOTE", "promote")):
        body = re.search(r"#define " + macro + r"\(_\)(.*?)\n\n", text, re.S)
        assert body, f"{macro} not found in {HEADER}"
        for name, overload in re.findall(r"_\((\w+)(?:,\s*(\w+))?\)", body.group(1)):
            policies["aten::" + name + ("." + overload if overload else "")] = policy
    return policies


def test_every_op_of_torchs_lists_has_an_rgpu_autocast_kernel():
    policies = header_lists()
    assert len(policies) > 100
    registered = autocast_ops("AutocastPrivateUse1")
    missing = [op for op in policies if op not in registered]
    assert not missing, f"in torch's autocast lists but not cast on rgpu: {missing}"


def dev(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype).to("rgpu")


# One call per op, named by the aten op it reaches first (the test checks it is in that list).
LOWER_PRECISION = {
    "aten::matmul": lambda: dev(3, 4) @ dev(4, 5),
    "aten::mm": lambda: torch.mm(dev(3, 4), dev(4, 5)),
    "aten::bmm": lambda: torch.bmm(dev(2, 3, 4), dev(2, 4, 5)),
    "aten::addmm": lambda: torch.addmm(dev(5), dev(3, 4), dev(4, 5)),
    "aten::baddbmm": lambda: torch.baddbmm(dev(2, 3, 5), dev(2, 3, 4), dev(2, 4, 5)),
    "aten::mv": lambda: torch.mv(dev(3, 4), dev(4)),
    "aten::linear": lambda: F.linear(dev(3, 4), dev(5, 4), dev(5)),
    "aten::conv2d": lambda: F.conv2d(dev(1, 2, 5, 5), dev(3, 2, 3, 3)),
    "aten::conv1d": lambda: F.conv1d(dev(1, 2, 5), dev(3, 2, 3)),
    "aten::einsum": lambda: torch.einsum("ij,jk->ik", dev(3, 4), dev(4, 5)),
    "aten::prelu": lambda: F.prelu(dev(2, 3), dev(1)),
    "aten::lstm_cell": lambda: torch.lstm_cell(dev(2, 3), [dev(2, 4), dev(2, 4)], dev(16, 3), dev(16, 4))[0],
    "aten::gru_cell": lambda: torch.gru_cell(dev(2, 3), dev(2, 4), dev(12, 3), dev(12, 4)),
    "aten::scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(dev(1, 2, 3, 4), dev(1, 2, 3, 4),
                                                                                 dev(1, 2, 3, 4)),
}
FP32 = {  # inputs in the low precision dtype: cast up to float32
    "aten::exp": lambda d: torch.exp(dev(3, dtype=d)),
    "aten::log": lambda d: torch.log(dev(3, dtype=d).abs()),
    "aten::rsqrt": lambda d: torch.rsqrt(dev(3, dtype=d).abs()),
    "aten::pow.Tensor_Scalar": lambda d: torch.pow(dev(3, dtype=d), 2),
    "aten::softplus": lambda d: F.softplus(dev(3, dtype=d)),
    "aten::layer_norm": lambda d: F.layer_norm(dev(2, 4, dtype=d), (4,)),
    "aten::group_norm": lambda d: F.group_norm(dev(2, 4, 3, dtype=d), 2),
    "aten::mse_loss": lambda d: F.mse_loss(dev(3, dtype=d), dev(3, dtype=d)),
    "aten::l1_loss": lambda d: F.l1_loss(dev(3, dtype=d), dev(3, dtype=d)),
    "aten::binary_cross_entropy_with_logits": lambda d: F.binary_cross_entropy_with_logits(
        dev(3, dtype=d), torch.rand(3).to("rgpu").to(d)),
    "aten::logsumexp": lambda d: torch.logsumexp(dev(3, 4, dtype=d), 1),
    "aten::cosine_similarity": lambda d: F.cosine_similarity(dev(2, 4, dtype=d), dev(2, 4, dtype=d)),
}
FP32_SET_OPT_DTYPE = {  # reductions and softmax: dtype=float32 unless the caller set one
    "aten::softmax.int": lambda d: torch.softmax(dev(2, 3, dtype=d), 1),
    "aten::log_softmax.int": lambda d: torch.log_softmax(dev(2, 3, dtype=d), 1),
    "aten::sum": lambda d: torch.sum(dev(2, 3, dtype=d)),
    "aten::sum.dim_IntList": lambda d: torch.sum(dev(2, 3, dtype=d), 1),
    "aten::cumsum": lambda d: torch.cumsum(dev(2, 3, dtype=d), 1),
    "aten::prod": lambda d: torch.prod(dev(2, 3, dtype=d)),
}
PROMOTE = {  # one float32 and one low precision input: the widest, float32
    "aten::addcmul": lambda d: torch.addcmul(dev(3), dev(3, dtype=d), dev(3)),
    "aten::addcdiv": lambda d: torch.addcdiv(dev(3), dev(3, dtype=d), dev(3).abs() + 1),
    "aten::atan2": lambda d: torch.atan2(dev(3), dev(3, dtype=d)),
    "aten::dot": lambda d: torch.dot(dev(3), dev(3, dtype=d)),
    "aten::cross": lambda d: torch.cross(dev(2, 3), dev(2, 3, dtype=d), dim=1),
    "aten::scatter_add": lambda d: torch.scatter_add(dev(3), 0, torch.tensor([0, 1, 1]).to("rgpu"), dev(3, dtype=d)),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("op", sorted(LOWER_PRECISION))
def test_lower_precision_ops_run_in_the_autocast_dtype(op, dtype):
    assert header_lists()[op] == "lower_precision_fp"
    with torch.autocast("rgpu", dtype=dtype):
        out = LOWER_PRECISION[op]()
    assert out.device.type == "rgpu" and out.dtype == dtype
    assert torch.isfinite(out.cpu().float()).all()
    # Outside the region nothing is cast.
    assert LOWER_PRECISION[op]().dtype == torch.float32


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("op", sorted(FP32) + sorted(FP32_SET_OPT_DTYPE))
def test_fp32_ops_run_in_float32(op, dtype):
    assert header_lists()[op] in ("fp32", "fp32_set_opt_dtype")
    fn = FP32.get(op) or FP32_SET_OPT_DTYPE[op]
    with torch.autocast("rgpu", dtype=dtype):
        out = fn(dtype)
    assert out.dtype == torch.float32
    assert fn(dtype).dtype == dtype  # not cast outside autocast


def test_an_explicit_dtype_is_kept():
    x = dev(2, 3, dtype=torch.bfloat16)
    with torch.autocast("rgpu", dtype=torch.bfloat16):
        assert torch.softmax(x, 1, dtype=torch.float64).dtype == torch.float64


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("op", sorted(PROMOTE))
def test_promote_ops_run_in_the_widest_dtype(op, dtype):
    assert header_lists()[op] == "promote"
    with torch.autocast("rgpu", dtype=dtype):
        assert PROMOTE[op](dtype).dtype == torch.float32


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_ops_outside_the_lists_keep_their_dtype(dtype):
    with torch.autocast("rgpu", dtype=dtype):
        a = dev(3)
        assert (a + a).dtype == torch.float32
        assert torch.relu(a).dtype == torch.float32
        assert (dev(3, 4) @ dev(4)).relu().dtype == dtype


def test_binary_cross_entropy_is_refused_as_on_cuda():
    with torch.autocast("rgpu", dtype=torch.float16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(torch.rand(3).to("rgpu"), torch.rand(3).to("rgpu"))


def test_autocast_values_match_the_cpu_in_the_same_dtype():
    """The cast is the only change: matmul under autocast equals matmul of the cast inputs."""
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    with torch.autocast("rgpu", dtype=torch.bfloat16):
        out = a.to("rgpu") @ b.to("rgpu")
    torch.testing.assert_close(out.cpu(), a.bfloat16() @ b.bfloat16())


def test_autocast_training_step_and_backward():
    """A small model under autocast: the forward's matmuls in bfloat16, the loss in float32, the
    gradients in the parameters' dtype (float32), as on cuda."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("rgpu")
    x, y = torch.randn(5, 8).to("rgpu"), torch.randint(0, 4, (5,)).to("rgpu")
    with torch.autocast("rgpu", dtype=torch.bfloat16):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    for p in model.parameters():
        assert p.grad.dtype == torch.float32 and torch.isfinite(p.grad.cpu()).all()


def make_pair(seed=0):
    torch.manual_seed(seed)
    cpu = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    rg = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    rg.load_state_dict(cpu.state_dict())
    return cpu, rg.to("rgpu")


def scaler_steps(model, device, batches, poison=()):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 12, growth_interval=2)
    scales, skipped = [], []
    for step, (x, y) in enumerate(batches):
        opt.zero_grad()
        loss = F.mse_loss(model(x.to(device)), y.to(device))
        scaler.scale(loss).backward()
        if step in poison:
            next(model.parameters()).grad.view(-1)[0] = float("inf")
        before = [p.detach().cpu().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        skipped.append(all(torch.equal(b, p.detach().cpu()) for b, p in zip(before, model.parameters())))
        scales.append(scaler.get_scale())
    return scales, skipped


def test_grad_scaler_steps_like_the_cpu_one():
    """GradScaler("rgpu") against GradScaler("cpu") over 6 steps, one with an inf gradient: the
    same scales (backoff on the inf step, growth every 2 clean steps), the same skipped step, the
    same weights."""
    cpu, rg = make_pair()
    torch.manual_seed(1)
    batches = [(torch.randn(4, 6), torch.randn(4, 3)) for _ in range(6)]
    cpu_scales, cpu_skipped = scaler_steps(cpu, "cpu", batches, poison={3})
    rg_scales, rg_skipped = scaler_steps(rg, "rgpu", batches, poison={3})
    assert rg_skipped == cpu_skipped == [False, False, False, True, False, False]
    assert rg_scales == cpu_scales
    assert rg_scales[3] == rg_scales[2] * 0.5  # backoff on the skipped step
    tol = 1e-5 if ON_CUDA else 1e-6  # the GPU sums in other orders
    for p, q in zip(cpu.parameters(), rg.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=tol, atol=tol)


def test_grad_scaler_ops_on_rgpu():
    """The two ops GradScaler runs, on rgpu tensors, against the cpu."""
    grads = [torch.tensor([1.0, 2.0]), torch.tensor([4.0, float("nan")])]
    for device in ("cpu", "rgpu"):
        gs = [g.clone().to(device) for g in grads]
        found = torch.zeros(1, device=device)
        torch._amp_foreach_non_finite_check_and_unscale_(gs, found, torch.full((1,), 0.5, device=device))
        assert found.item() == 1.0
        assert gs[0].cpu().tolist() == [0.5, 1.0]
        scale = torch.full((1,), 8.0, device=device)
        tracker = torch.zeros(1, dtype=torch.int32, device=device)
        torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 2)
        assert scale.item() == 4.0 and tracker.item() == 0
        torch._amp_update_scale_(scale, tracker, torch.zeros(1, device=device), 2.0, 0.5, 1)
        assert scale.item() == 8.0
