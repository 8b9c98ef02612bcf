"""scaled_dot_product_attention on rgpu runs the fused kernel the server's device would pick for a
local run (python/rgpu/csrc/aten/attention.cpp), not the math decomposition: on a cpu server
_scaled_dot_product_flash_attention_for_cpu, as a local cpu run; on a cuda server
_scaled_dot_product_efficient_attention where its constraints surely hold. Each case compares
outputs and gradients with the local cpu run, and reads which aten ops the client dispatched
(torch.profiler) to see which kernel ran."""
import pytest
from device_fixtures import ON_CUDA, opserver, use_opserver  # noqa: F401,E402  (fixtures; skips without torch)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import rgpu  # noqa: E402

FUSED = "aten::_scaled_dot_product_efficient_attention" if ON_CUDA else "aten::_scaled_dot_product_flash_attention_for_cpu"
TOL = dict(rtol=1e-4, atol=1e-5) if ON_CUDA else dict(rtol=1e-6, atol=1e-6)


def ops_dispatched(fn):
    """The aten ops the client dispatched while fn ran (names), and fn's result."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = fn()
    return {e.key for e in prof.key_averages()}, out


def attention_both(shape_q, shape_kv=None, **kw):
    """SDPA forward and backward on cpu and on rgpu from the same inputs; compares the output
    and the three input gradients, and returns the ops the rgpu forward and backward dispatched."""
    torch.manual_seed(0)
    shape_kv = shape_kv or shape_q
    cpu = [torch.randn(s, requires_grad=True) for s in (shape_q, shape_kv, shape_kv)]
    dev = [t.detach().to("rgpu").requires_grad_() for t in cpu]
    mask = kw.pop("attn_mask", None)
    ref = F.scaled_dot_product_attention(*cpu, attn_mask=mask, **kw)
    ref.sum().backward()

    def run():
        out = F.scaled_dot_product_attention(*dev, attn_mask=None if mask is None else mask.to("rgpu"), **kw)
        out.sum().backward()
        return out

    ops, out = ops_dispatched(run)
    assert out.device.type == "rgpu"
    torch.testing.assert_close(out.cpu(), ref.detach(), **TOL)
    for c, d, name in zip(cpu, dev, "qkv"):
        torch.testing.assert_close(d.grad.cpu(), c.grad, **TOL, msg=lambda m: f"d{name}: {m}")
    return ops


@pytest.mark.parametrize("causal", [False, True])
def test_attention_runs_the_fused_kernel_a_local_run_uses(causal):
    ops = attention_both((2, 4, 32, 64), is_causal=causal)
    assert FUSED in ops, sorted(o for o in ops if "attention" in o or "bmm" in o)
    assert "aten::bmm" not in ops, "the math decomposition ran"


def test_cross_attention_of_other_lengths():
    ops = attention_both((2, 4, 16, 32), (2, 4, 48, 32))
    assert FUSED in ops


def test_a_head_dim_the_cuda_kernel_may_refuse_still_agrees():
    """Head dim 12 is not a multiple of 8: a cuda server runs the math path, a cpu server what
    the cpu rules allow; either way the results agree with the local run."""
    attention_both((1, 2, 8, 12), is_causal=True)


def test_a_mask_still_agrees():
    mask = torch.rand(8, 8) > 0.3
    mask |= torch.eye(8, dtype=torch.bool)  # no row fully masked (its softmax is nan everywhere)
    attention_both((1, 2, 8, 16), attn_mask=mask)


def test_the_users_backend_switches_hold():
    """sdpa_kernel([MATH]) is what a user writes to rule out the fused kernels: rgpu obeys it."""
    with sdpa_kernel([SDPBackend.MATH]):
        ops = attention_both((1, 2, 8, 16))
    assert FUSED not in ops
    assert "aten::bmm" in ops or "aten::matmul" in ops


def test_fused_attention_is_one_post_forward():
    """The fused forward is one op on the wire (the math path was about ten)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 32, 64).to("rgpu") for _ in range(3))
    F.scaled_dot_product_attention(q, k, v, is_causal=True)  # warm the meta cache
    before = rgpu.stats()["posts"]
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    posts = rgpu.stats()["posts"] - before
    assert posts <= 3, f"{posts} posts for one attention forward"
    assert out.shape == (2, 4, 32, 64)
