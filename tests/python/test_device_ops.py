"""Parity of the rgpu device with the CPU: each case runs the same function on CPU tensors and on
their copies on rgpu (served by rgpu-opserver --device cpu), and compares values and dtypes."""
import io
import re

import pytest
from device_fixtures import ON_CUDA, opserver, use_opserver  # noqa: F401,E402  (fixtures; skips without torch)
import torch  # noqa: E402

import rgpu  # noqa: F401,E402  (registers the device)

D = "rgpu"


def to_dev(v):
    if isinstance(v, torch.Tensor):
        return v.to(D)
    if isinstance(v, (list, tuple)):
        return type(v)(to_dev(x) for x in v)
    if isinstance(v, dict):
        return {k: to_dev(x) for k, x in v.items()}
    return v


def assert_same(cpu, dev, exact=False):
    if isinstance(cpu, torch.Tensor):
        assert isinstance(dev, torch.Tensor), f"expected a tensor, got {type(dev)}"
        assert dev.device.type == D, f"result on {dev.device}, expected rgpu"
        assert dev.dtype == cpu.dtype, f"dtype {dev.dtype} != cpu's {cpu.dtype}"
        assert dev.shape == cpu.shape, f"shape {tuple(dev.shape)} != cpu's {tuple(cpu.shape)}"
        got = dev.cpu()
        if exact or not (cpu.is_floating_point() or cpu.is_complex()):
            assert torch.equal(got, cpu), f"values differ:\n{got}\n{cpu}"
        else:
            torch.testing.assert_close(got, cpu, equal_nan=True)
    elif isinstance(cpu, (list, tuple)):
        assert len(cpu) == len(dev)
        for a, b in zip(cpu, dev):
            assert_same(a, b, exact)
    else:
        assert cpu == dev


def check(fn, *args, exact=False):
    cpu_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    dev_args = to_dev(list(args))
    cpu = fn(*cpu_args)
    dev = fn(*dev_args)
    assert_same(cpu, dev, exact)
    # In-place cases: the arguments must have changed alike too.
    for a, b in zip(cpu_args, dev_args):
        if isinstance(a, torch.Tensor):
            assert_same(a, b, exact)


torch.manual_seed(1234)
A = torch.randn(4, 5)
B = torch.randn(4, 5)
V = torch.randn(5)
I = torch.randint(-5, 5, (4, 5))
U8 = torch.randint(0, 255, (4, 5), dtype=torch.uint8)
M = torch.randn(3, 4, 5)
POS = torch.rand(4, 5) + 0.1
MASK = A > 0
IDX = torch.tensor([2, 0, 3])

CASES = {
    # elementwise and dtype promotion
    "add": (lambda a, b: a + b, A, B),
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=2.5), A, B),
    "sub_broadcast": (lambda a, v: a - v, A, V),
    "mul_scalar": (lambda a: a * 2, A),
    "int_times_float_scalar": (lambda i: i * 2.5, I),
    "int_plus_float_tensor": (lambda i, a: i + a, I, A),
    "int_true_div": (lambda i: i / 3, I),
    "int_floor_div": (lambda i: torch.div(i, 3, rounding_mode="floor"), I),
    "uint8_plus_int": (lambda u: u + 300, U8),
    "uint8_plus_int64_tensor": (lambda u, i: u + i, U8, I),
    "half_plus_float": (lambda a, b: a.half() + b, A, B),
    "bool_and": (lambda a, b: (a > 0) & (b > 0), A, B),
    "compare": (lambda a, b: a < b, A, B),
    "zero_dim_tensor": (lambda a: a * torch.tensor(3.0, dtype=torch.float64), A),
    "zero_dim_int_with_float": (lambda a: a + torch.tensor(3), A),
    "double": (lambda a: a.double() * 1.5, A),
    "where": (lambda m, a, b: torch.where(m, a, b), MASK, A, B),
    "clamp": (lambda a: a.clamp(-0.5, 0.5), A),
    "pow": (lambda a: a.abs().pow(1.5), A),
    "exp_log": (lambda p: torch.log(torch.exp(p)), POS),
    "trig": (lambda a: torch.sin(a) + torch.cos(a) * torch.tanh(a), A),
    "sqrt_rsqrt": (lambda p: torch.sqrt(p) + torch.rsqrt(p), POS),
    "sigmoid_relu_gelu": (lambda a: torch.sigmoid(a) + torch.relu(a) + torch.nn.functional.gelu(a), A),
    "abs_neg_sign": (lambda a: a.abs() - a.neg() + a.sign(), A),
    "fmod_remainder": (lambda i: torch.fmod(i, 3) + torch.remainder(i, 3), I),
    "lerp": (lambda a, b: torch.lerp(a, b, 0.3), A, B),
    "addcmul": (lambda a, b, p: torch.addcmul(a, b, p, value=0.5), A, B, POS),
    "maximum": (lambda a, b: torch.maximum(a, b), A, B),
    "isnan_nan_to_num": (lambda a: torch.nan_to_num(a / (a > 0)), A),
    "to_dtype": (lambda a: a.to(torch.int32), A),
    "complex": (lambda a, b: torch.complex(a, b).abs(), A, B),
    # views
    "view": (lambda m: m.view(12, 5) * 1, M),
    "reshape_copy": (lambda m: m.transpose(0, 1).reshape(-1) + 0, M),
    "transpose_contiguous": (lambda m: m.transpose(1, 2).contiguous(), M),
    "permute": (lambda m: m.permute(2, 0, 1) + 1, M),
    "t": (lambda a: a.t() * 1, A),
    "narrow_select": (lambda m: m.narrow(1, 1, 2).select(2, 3) + 0, M),
    "slice_step": (lambda m: m[:, ::2, 1::2] * 1, M),
    "unsqueeze_squeeze_expand": (lambda v: v.unsqueeze(0).expand(3, 5).squeeze() + 0, V),
    "flatten": (lambda m: m.flatten(1) + 0, M),
    "unfold": (lambda v: v.unfold(0, 2, 1) + 0, V),
    "diagonal": (lambda a: a.diagonal() + 0, A),
    "chunk": (lambda a: [c + 0 for c in a.chunk(2, dim=1)], A),
    "split": (lambda a: [c * 1 for c in torch.split(a, [1, 3], dim=0)], A),
    "unbind": (lambda a: [c + 0 for c in a.unbind(0)], A),
    "as_strided": (lambda a: a.as_strided((2, 2), (1, 2), 1) + 0, A),
    "view_as_real": (lambda a, b: torch.view_as_real(torch.complex(a, b)) + 0, A, B),
    "write_through_view": (lambda a: (a[:, 1].add_(10), a)[1], A),
    "write_through_transpose": (lambda a: (a.t()[0].mul_(0), a)[1], A),
    "expand_then_clone": (lambda v: v.expand(4, 5).clone(), V),
    # in-place
    "add_": (lambda a, b: a.add_(b), A, B),
    "mul_scalar_": (lambda a: a.mul_(3), A),
    "clamp_": (lambda a: a.clamp_(min=0), A),
    "zero_": (lambda a: a.zero_(), A),
    "fill_": (lambda a: a.fill_(7), A),
    "copy_": (lambda a, b: a.copy_(b), A, B),
    "copy_broadcast_dtype": (lambda i, v: i.copy_(v), I, V),
    "masked_fill_": (lambda a, m: a.masked_fill_(m, -1), A, MASK),
    "index_put_": (lambda a, i: a.index_put_((i,), torch.tensor(5.0)), A, IDX),
    "setitem_bool": (lambda a: (a.__setitem__(a > 0, 0.0), a)[1], A),
    "setitem_slice": (lambda a, v: (a.__setitem__((slice(None), 2), v[:4]), a)[1], A, V),
    "scatter_": (lambda a, b: a.scatter_(1, torch.tensor([[0], [1], [2], [3]]).to(a.device), b[:, :1]), A, B),
    "div_int_": (lambda i: i.div_(2, rounding_mode="trunc"), I),
    "out_resize": (lambda a, b: torch.add(a, b, out=torch.empty(0, device=a.device)), A, B),
    "resize_": (lambda a: a.resize_(2, 3).fill_(1), A),
    # reductions
    "sum": (lambda a: a.sum(), A),
    "sum_dim_keepdim": (lambda m: m.sum(dim=(0, 2), keepdim=True), M),
    "sum_int_dtype": (lambda i: i.sum(), I),
    "mean_std_var": (lambda a: torch.stack([a.mean(), a.std(), a.var()]), A),
    "prod": (lambda p: p.prod(dim=1), POS),
    "max_dim": (lambda a: tuple(a.max(dim=1)), A),
    "min_all": (lambda a: a.min(), A),
    "argmax": (lambda a: a.argmax(dim=0), A),
    "norm": (lambda a: torch.linalg.vector_norm(a, dim=1), A),
    "cumsum": (lambda a: a.cumsum(dim=1), A),
    "logsumexp": (lambda a: torch.logsumexp(a, dim=1), A),
    "all_any": (lambda a: torch.stack([(a > -10).all(), (a > 10).any()]), A),
    "topk": (lambda a: tuple(a.topk(2, dim=1)), A),
    "sort": (lambda a: tuple(a.sort(dim=1)), A),
    "median": (lambda v: v.median(), V),
    "count_nonzero": (lambda i: torch.count_nonzero(i), I),
    # indexing
    "index_tensor": (lambda a, i: a[i], A, IDX),
    "index_2d": (lambda a, i: a[i, i], A, IDX),
    "index_bool": (lambda a, m: a[m], A, MASK),
    "index_select": (lambda a, i: a.index_select(1, i), A, IDX),
    "gather": (lambda a: a.gather(1, torch.tensor([[0, 1], [1, 2], [2, 3], [3, 4]]).to(a.device)), A),
    "masked_select": (lambda a, m: torch.masked_select(a, m), A, MASK),
    "nonzero": (lambda a: torch.nonzero(a > 0), A),
    "where_one_arg": (lambda a: torch.where(a > 0), A),
    "unique": (lambda i: torch.unique(i, return_counts=True), I),
    "int_and_slice": (lambda m: m[1, :, 2:4] * 1, M),
    "ellipsis_none": (lambda m: m[..., None, 1] + 0, M),
    "take_along_dim": (lambda a: torch.take_along_dim(a, a.argsort(dim=1), dim=1), A),
    # joining and shaping
    "cat": (lambda a, b: torch.cat([a, b], dim=1), A, B),
    "stack": (lambda a, b: torch.stack([a, b]), A, B),
    "flip_roll": (lambda a: torch.roll(a.flip(0), 2, dims=1), A),
    "repeat_tile": (lambda v: torch.cat([v.repeat(2), v.tile((2,))]), V),
    "tril_triu": (lambda a: a.tril() + a.triu(1), A),
    "repeat_interleave": (lambda v: v.repeat_interleave(2), V),
    # linear algebra and nn
    "matmul": (lambda a, b: a @ b.t(), A, B),
    "mv": (lambda a, v: a @ v, A, V),
    "bmm": (lambda m: torch.bmm(m, m.transpose(1, 2)), M),
    "einsum": (lambda m: torch.einsum("bij,bkj->bik", m, m), M),
    "softmax": (lambda a: torch.softmax(a, dim=1) + torch.log_softmax(a, dim=0), A),
    "cross_entropy": (lambda a: torch.nn.functional.cross_entropy(a, torch.tensor([0, 1, 2, 3]).to(a.device)), A),
    "mse": (lambda a, b: torch.nn.functional.mse_loss(a, b), A, B),
    "layer_norm": (lambda m: torch.nn.functional.layer_norm(m, (5,)), M),
    "conv2d": (lambda x, w: torch.nn.functional.conv2d(x, w, padding=1), torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3)),
    "max_pool2d": (lambda x: torch.nn.functional.max_pool2d(x, 2), torch.randn(2, 3, 6, 6)),
    "avg_pool_interp": (lambda x: torch.nn.functional.interpolate(torch.nn.functional.avg_pool2d(x, 2), scale_factor=2),
                        torch.randn(1, 2, 4, 4)),
    "embedding": (lambda w: torch.nn.functional.embedding(torch.tensor([[0, 2], [1, 0]]).to(w.device), w), A),
    "batch_norm_train": (lambda x: torch.nn.functional.batch_norm(x, None, None, training=True), torch.randn(8, 3)),
    "linalg_solve": (lambda: None,),
}
del CASES["linalg_solve"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_parity_with_cpu(name):
    fn, *args = CASES[name]
    check(fn, *args)


def test_creation_ops():
    for make in (lambda d: torch.zeros(2, 3, device=d), lambda d: torch.ones(3, dtype=torch.int64, device=d),
                 lambda d: torch.full((2, 2), 3.5, device=d), lambda d: torch.arange(10, device=d),
                 lambda d: torch.arange(0, 1, 0.25, device=d), lambda d: torch.linspace(0, 1, 7, device=d),
                 lambda d: torch.eye(3, device=d), lambda d: torch.tensor([[1, 2], [3, 4]], device=d),
                 lambda d: torch.zeros_like(torch.empty(2, 2, device=d)), lambda d: torch.empty(0, device=d)):
        assert_same(make("cpu"), make(D))


@pytest.mark.parametrize("name,make", [
    ("randn", lambda d: torch.randn(100, device=d)),
    ("rand", lambda d: torch.rand(3, 7, device=d)),
    ("randint", lambda d: torch.randint(0, 10, (50,), device=d)),
    ("normal_", lambda d: torch.empty(20, device=d).normal_(2.0, 3.0)),
    ("uniform_", lambda d: torch.empty(20, device=d).uniform_(-1, 1)),
    ("bernoulli", lambda d: torch.bernoulli(torch.full((30,), 0.5, device=d))),
    ("randperm", lambda d: torch.randperm(10, device=d)),
    ("dropout", lambda d: torch.nn.functional.dropout(torch.ones(40, device=d), 0.5)),
])
def test_random_with_fixed_seed_matches_cpu(name, make):
    # torch.manual_seed seeds the server's generator; with the server on the cpu the draws match
    # the client's own cpu generator with the same seed. A GPU's generator draws other numbers:
    # there the same seed must give the same draws, of the right dtype and shape.
    torch.manual_seed(7)
    cpu = make("cpu")
    torch.manual_seed(7)
    dev = make(D)
    if ON_CUDA:
        assert dev.dtype == cpu.dtype and dev.shape == cpu.shape
    else:
        assert_same(cpu, dev, exact=True)
    torch.manual_seed(7)
    assert torch.equal(make(D).cpu(), dev.cpu()), "the same seed must give the same draws"


def test_item_tolist_print_and_equal():
    x = torch.arange(6, device=D).reshape(2, 3)
    assert x.sum().item() == 15
    assert x.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert "device='rgpu:0'" in repr(x) and "[3, 4, 5]" in repr(x)
    assert torch.equal(x, x.clone())
    assert torch.allclose(x.float(), x.float() + 1e-9)
    assert bool((x > -1).all())
    assert x.is_rgpu and x.device == torch.device("rgpu:0")


def test_copies_between_devices_keep_values_and_layout():
    a = torch.randn(5, 7)
    d = a.to(D)
    assert torch.equal(d.cpu(), a)
    assert torch.equal(d.t().cpu(), a.t())  # non-contiguous read
    e = torch.empty(7, 5, device=D)
    e.copy_(a.t())  # non-contiguous host source
    assert torch.equal(e.cpu(), a.t())
    f = torch.empty(5, 7, dtype=torch.float64, device=D).copy_(d)  # rgpu -> rgpu with a dtype change
    assert torch.equal(f.cpu(), a.double())
    big = torch.randn(3 << 20)  # 12 MiB: more than one frame each way
    assert torch.equal(big.to(D).cpu(), big)
    assert torch.equal(torch.ones(3, device=D).to(torch.float16).cpu(), torch.ones(3, dtype=torch.float16))


@pytest.mark.skipif(ON_CUDA, reason="an out-of-bounds index is a device-side assert on a GPU, which ends the "
                    "CUDA context of the server's session for good, as it does for a local program")
def test_errors_name_the_op():
    a = torch.ones(3, device=D)
    # Shape errors are found on the meta device, at the call, like on any device.
    with pytest.raises(RuntimeError, match="size of tensor a"):
        a + torch.ones(4, device=D)
    # An error only the server can see surfaces at the next wait, naming the op.
    # Its type is the server's: IndexError on a cpu server, as on the cpu (a CUDA error, a
    # RuntimeError, on a GPU).
    bad = a[torch.tensor([10], device=D)]
    with pytest.raises(RuntimeError if ON_CUDA else IndexError, match=r"aten::index.*out of bounds|out of bounds.*aten::index"):
        bad.sum().item()
    # The connection keeps working.
    assert a.sum().item() == 3.0


def test_storage_and_state_dict_round_trip():
    m = torch.nn.Linear(4, 3).to(D)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf)
    assert all(v.device.type == D for v in sd.values())
    m2 = torch.nn.Linear(4, 3).to(D)
    m2.load_state_dict(sd)
    for k, v in m.state_dict().items():
        assert torch.equal(v.cpu(), m2.state_dict()[k].cpu())
    buf.seek(0)
    sd_cpu = torch.load(buf, map_location="cpu")
    assert torch.equal(sd_cpu["weight"], m.weight.detach().cpu())
    s = torch.UntypedStorage(16, device=D)
    assert s.device.type == D and s.nbytes() == 16


@pytest.mark.skipif(ON_CUDA, reason="an out-of-bounds index is a device-side assert on a GPU, which ends the "
                    "CUDA context of the server's session for good, as it does for a local program")
def test_deferred_error_at_a_large_read_keeps_the_connection():
    big = torch.zeros(3 << 20, device=D)  # 12 MiB: the reply spans several frames
    a = torch.ones(3, device=D)
    a[torch.tensor([10], device=D)]  # fails on the server, without waiting
    with pytest.raises(IndexError, match="aten::index.* failed on rgpu-opserver"):
        big.cpu()
    assert big.sum().item() == 0.0
    assert torch.equal(big[:4].cpu(), torch.zeros(4))


def test_printing_waits_once_and_matches_cpu():
    torch.manual_seed(0)
    cpu = torch.randn(100, 100)
    dev = cpu.to(D)
    dev.sum().item()
    before = rgpu.stats()
    text = repr(dev)
    assert rgpu.stats()["waits"] - before["waits"] == 1
    assert re.sub(r",\s*device='rgpu:0'", "", text) == repr(cpu)
