"""Errors of the rgpu device (issue 14, items 11 and 12).

- Their Python type survives the wire: an op that fails on rgpu-opserver raises on the client what
  the same op raises on a local device (IndexError, NotImplementedError, torch.linalg.LinAlgError,
  RuntimeError, ...), whether it failed in a call that waited or in a one-way call whose error
  surfaced later (protocol/torch_wire.h, ErrorKind).
- Sparse tensors are refused: every way to make or use a sparse rgpu tensor raises
  NotImplementedError naming the limitation, and the device keeps working after.
- A deferred error (an op posted one-way fails on the server, the error surfaces at a later call
  that waits) names the op and says it surfaced later, on each path that posts one-way: plain
  ops, autocast, compiled graphs, the fused LSTM/GRU cells, copies between devices, pinned
  uploads, the generator. (Streams send nothing of their own: every stream of a device is its one
  in-order stream.)

The server-only failures used: bitwise_and of floats (meta kernels do not check dtypes; every
server raises NotImplementedError before running anything, cuda too), and on a cpu server an
index out of range (on cuda that would be a device-side assert, which ruins the server's context
for the rest of the run)."""
import re

import pytest
from device_fixtures import ON_CUDA, OpServer, opserver, run_python, two_devices, use_opserver  # noqa: F401,E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import rgpu  # noqa: F401,E402

D = "rgpu"
SURFACED = r"(.|\n)*surfaced at the next operation that waited"
cpu_only = pytest.mark.skipif(ON_CUDA, reason="an index out of range is a device-side assert on a cuda server")


def still_works():
    assert torch.ones(3, device=D).sum().item() == 3.0


# --- error types across the wire ---------------------------------------------------------------

CASES = {
    # a call that waits for the server (boolean indexing), raising IndexError there
    "mask_shape": lambda d: torch.zeros(3, device=d)[torch.tensor([True, False], device=d)],
    # the meta run raises, the server decides (and raises IndexError)
    "dim_out_of_range": lambda d: torch.zeros(3, device=d).sum(dim=5),
    # one-way: the server's NotImplementedError surfaces at the read
    "not_implemented_for_dtype": lambda d: torch.ones(2, device=d).bitwise_and(torch.ones(2, device=d)).cpu(),
    # torch.linalg.LinAlgError (a RuntimeError subclass of its own)
    "singular_matrix": lambda d: torch.linalg.inv(torch.zeros(2, 2, device=d)).cpu(),
    # a plain RuntimeError stays one
    "kthvalue_out_of_range": lambda d: torch.zeros(3, device=d).kthvalue(10)[0].cpu(),
}


def error_of(fn):
    try:
        fn()
        if torch.rgpu.is_initialized():
            torch.rgpu.synchronize()
    except Exception as e:  # noqa: BLE001
        return e
    return None


@pytest.mark.parametrize("case", list(CASES))
def test_the_error_type_is_the_local_devices(case):
    expected = error_of(lambda: CASES[case]("cpu"))
    assert expected is not None
    got = error_of(lambda: CASES[case](D))
    assert got is not None, f"{case}: no error on rgpu; cpu raised {expected!r}"
    assert type(got) is type(expected), f"{case}: rgpu raised {type(got).__name__} ({got}), cpu {type(expected).__name__}"
    # torch's own words are kept (a kernel's name says the server's device: bitwise_and_cuda on a
    # cuda server where the local run says bitwise_and_cpu)
    first_words = str(expected).split("\n")[0][:30]
    if ON_CUDA:
        first_words = first_words.replace("_cpu", "_cuda")
    assert first_words in str(got), f"{case}: {got}"
    still_works()


@cpu_only
def test_a_deferred_index_error_keeps_its_type_and_names_the_op():
    x = torch.zeros(3, device=D).index_select(0, torch.tensor([9], device=D))  # one-way
    with pytest.raises(IndexError, match=r"aten::index_select failed on rgpu-opserver: index out of range" + SURFACED):
        x.cpu()
    still_works()


# --- sparse tensors: refused, clearly ----------------------------------------------------------

SPARSE_MESSAGE = "sparse tensors are not supported on the rgpu device yet; keep them on cpu"


def dense(d=D):
    return torch.tensor([[0.0, 2.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 3.0]], device=d)


SPARSE = {
    "to_sparse": lambda: dense().to_sparse(),
    "to_sparse_coo_layout": lambda: dense().to_sparse(layout=torch.sparse_coo),
    "to_sparse_csr": lambda: dense().to_sparse_csr(),
    "to_sparse_csc": lambda: dense().to_sparse_csc(),
    "to_sparse_bsr": lambda: dense().to_sparse_bsr((1, 1)),
    "sparse_coo_tensor_on_rgpu": lambda: torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([2.0, 1.0]),
                                                                 (3, 3), device=D),
    "sparse_coo_tensor_of_rgpu_parts": lambda: torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]], device=D),
                                                                       torch.tensor([2.0, 1.0], device=D), (3, 3)),
    "sparse_csr_tensor_on_rgpu": lambda: torch.sparse_csr_tensor(torch.tensor([0, 1, 2, 3]), torch.tensor([1, 0, 2]),
                                                                 torch.tensor([2.0, 1.0, 3.0]), (3, 3), device=D),
    "coo_to_rgpu": lambda: dense("cpu").to_sparse().to(D),
    "csr_to_rgpu": lambda: dense("cpu").to_sparse_csr().to(D),
    "coo_rgpu_method": lambda: dense("cpu").to_sparse().rgpu(),
    "sparse_mm": lambda: torch.sparse.mm(dense("cpu").to_sparse(), dense()),
    "addmm_sparse": lambda: torch.addmm(dense(), dense("cpu").to_sparse(), dense()),
    "add_sparse": lambda: dense() + dense("cpu").to_sparse(),
    "copy_from_sparse": lambda: dense().copy_(dense("cpu").to_sparse()),
}


@pytest.mark.parametrize("case", list(SPARSE))
def test_sparse_is_refused_with_not_implemented(case):
    with pytest.raises(NotImplementedError, match=re.escape(SPARSE_MESSAGE)):
        SPARSE[case]()
        torch.rgpu.synchronize()
    still_works()


def test_sparse_embedding_gradient_is_refused():
    emb = torch.nn.Embedding(10, 3, sparse=True).to(D)
    loss = emb(torch.tensor([1, 2, 1], device=D)).sum()
    with pytest.raises(NotImplementedError, match=re.escape(SPARSE_MESSAGE)):
        loss.backward()
    still_works()


def test_dense_to_dense_and_cpu_sparse_still_work():
    x = dense()
    assert x.to_dense() is x  # a strided tensor is its own dense form
    s = x.cpu().to_sparse()
    assert torch.equal(torch.sparse.mm(s, x.cpu()), x.cpu() @ x.cpu())
    assert torch.equal(s.coalesce().to_dense().to(D).cpu(), x.cpu())
    assert torch.sparse.sum(s).item() == 6.0


# --- deferred errors name the op, on every path that posts one-way -----------------------------

def not_implemented(x):
    """A one-way op every server refuses after the client posted it (floats have no bitwise and)."""
    return x.bitwise_and(x)


def test_deferred_plain_op():
    y = not_implemented(torch.ones(4, device=D))
    with pytest.raises(NotImplementedError, match=r"rgpu: aten::bitwise_and\.Tensor\S* failed on rgpu-opserver" + SURFACED):
        y.cpu()
    still_works()


def test_deferred_under_autocast():
    a, b = torch.randn(4, 4, device=D), torch.randn(4, 4, device=D)
    with torch.autocast(D, dtype=torch.bfloat16):
        y = torch.mm(a, b)  # cast by autocast
        assert y.dtype == torch.bfloat16
        z = not_implemented(y)
    with pytest.raises(NotImplementedError, match=r"aten::bitwise_and\.Tensor\S* failed on rgpu-opserver" + SURFACED):
        z.sum().item()
    still_works()


def test_deferred_in_a_compiled_graph_names_the_graph_and_its_node():
    # gcd has no float kernel, and Inductor calls aten's for it: the same error whether the server
    # runs the graph op by op (which names the node) or Inductor's code (which has no nodes).
    # (bitwise_and of floats, not_implemented's op, is no test here: Inductor compiles it, as a
    # local torch.compile does.)
    @torch.compile(backend="rgpu")
    def f(x):
        return torch.gcd(x + x, x) + x

    y = f(torch.ones(4, device=D))
    with pytest.raises(NotImplementedError,
                       match=r"compiled graph \d+ failed on rgpu-opserver: (node \d+ \(aten::gcd\S*\)|in the code "
                             r"Inductor generated for it: NotImplementedError: \S*gcd)" + SURFACED):
        y.cpu()
    still_works()


def test_deferred_fused_gru_cell():
    n, h = 2, 3
    gates = torch.randn(n, 3 * h, device=D)
    bad_bias = torch.randn(2 * h, device=D)  # the server checks the biases' size, the meta kernel not
    hy, _ = torch.ops.aten._thnn_fused_gru_cell(gates, gates, torch.randn(n, h, device=D), bad_bias, bad_bias)
    with pytest.raises(RuntimeError, match=r"aten::_thnn_fused_gru_cell failed on rgpu-opserver" + SURFACED):
        hy.cpu()
    still_works()


def test_fused_lstm_cell_fails_at_the_call_naming_the_op():
    # torch's meta kernel of the LSTM cell checks what the server's does: its failures are not
    # deferred but raised at the call.
    n, h = 2, 3
    gates = torch.randn(n, 4 * h, device=D)
    bad_bias = torch.randn(2 * h, device=D)
    with pytest.raises(RuntimeError, match=r"_thnn_fused_lstm_cell"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.randn(n, h, device=D), bad_bias, bad_bias)
    still_works()


def test_deferred_after_a_pinned_upload_names_the_op_not_the_upload():
    batch = torch.ones(8).pin_memory()
    y = not_implemented(batch.to(D, non_blocking=True))
    with pytest.raises(NotImplementedError, match=r"aten::bitwise_and\.Tensor\S* failed on rgpu-opserver" + SURFACED):
        y.cpu()
    still_works()


@cpu_only
def test_deferred_out_of_range_indices_from_a_pinned_batch():
    w = torch.randn(5, 2, device=D)
    idx = torch.tensor([1, 7]).pin_memory()
    y = F.embedding(idx.to(D, non_blocking=True), w)
    with pytest.raises(IndexError, match=r"aten::(embedding|index_select)\S* failed on rgpu-opserver" + SURFACED):
        y.cpu()
    still_works()


def test_deferred_generator_state():
    torch.rgpu.set_rng_state(torch.zeros(3, dtype=torch.uint8))  # one-way; the server refuses it
    with pytest.raises(RuntimeError, match=r"set_rng_state failed on rgpu-opserver" + SURFACED):
        torch.rgpu.synchronize()
    still_works()


def test_deferred_across_devices_names_the_op(two_devices):
    p = run_python("""
import re, torch, rgpu
a = torch.ones(4, device="rgpu:0")
b = a.to("rgpu:1")            # a copy between devices, one-way
c = b.bitwise_and(b)          # refused on the server, on device 1
try:
    c.cpu()
except NotImplementedError as e:
    assert re.search(r"aten::bitwise_and\\.Tensor\\S* failed on rgpu-opserver(.|\\n)*surfaced at the next", str(e)), str(e)
else:
    raise AssertionError("no error")
assert torch.equal(b.cpu(), torch.ones(4)) and b.device.index == 1
print("ok")
""", env_extra={"RGPU_OPSERVER": two_devices.addr})
    assert p.returncode == 0 and "ok" in p.stdout, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr[-4000:]}"


# --- local CUDA next to rgpu (pytorch/pytorch#161129) -----------------------------------------

def test_local_cuda_in_the_same_process_warns_once_naming_the_pytorch_bug():
    # Without a GPU here, torch.cuda's initialisation is stood for by its flag: the warning is
    # queued with torch.cuda's lazy calls, which run when CUDA initialises (at once if it has).
    if torch.cuda.is_available():
        code = "import warnings, torch, rgpu\nwith warnings.catch_warnings(record=True) as w:\n" \
               "    warnings.simplefilter('always')\n    torch.zeros(1, device='cuda')\n    torch.zeros(1, device='cuda')\n"
    else:
        code = "import warnings, torch\ntorch.cuda._initialized = True\nwith warnings.catch_warnings(record=True) as w:\n" \
               "    warnings.simplefilter('always')\n    import rgpu\n"
    code += "msgs = [str(x.message) for x in w if 'pytorch/pytorch#161129' in str(x.message)]\nprint(len(msgs))\nprint(msgs[0])\n"
    p = run_python(code)
    assert p.returncode == 0, p.stderr[-4000:]
    count, message = p.stdout.split("\n", 1)
    assert count == "1", p.stdout
    assert "backward over local cuda tensors fails" in message and "opt_ready_stream" in message


def test_no_warning_without_local_cuda():
    p = run_python("import warnings, torch\nwith warnings.catch_warnings(record=True) as w:\n"
                   "    warnings.simplefilter('always')\n    import rgpu\n    torch.ones(2, device='rgpu').sum().item()\n"
                   "print(sum('161129' in str(x.message) for x in w))\n")
    assert p.returncode == 0, p.stderr[-4000:]
    assert p.stdout.strip() == "0"
