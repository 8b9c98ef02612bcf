"""Breadth: every operator in PyTorch's own OpInfo database (op_db) that supports float32, with up
to three of its sample inputs, on rgpu against the CPU. Operators left out are listed in SKIP with
the reason; anything else that fails is a bug of rgpu."""
import os

import pytest

from device_fixtures import opserver, use_opserver  # noqa: F401,E402  (fixtures; skips without torch)

pytest.importorskip("expecttest", reason="torch's op_db (torch.testing._internal) needs the expecttest package")

import torch  # noqa: E402
from device_fixtures import shared_opserver  # noqa: E402

# Importing op_db asks every device backend for its count, which opens the rgpu client's connection
# (at collection, before any fixture has set RGPU_OPSERVER): it must find this run's server, or the
# failed connection is what every later test in this process gets.
_outer = os.environ.get("RGPU_OPSERVER")
os.environ["RGPU_OPSERVER"] = shared_opserver().addr
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
if _outer is None:
    del os.environ["RGPU_OPSERVER"]
else:
    os.environ["RGPU_OPSERVER"] = _outer

import rgpu  # noqa: F401,E402

D = "rgpu"

SKIP = {
    # Sparse layouts: rgpu stores strided (dense) tensors only.
    "sparse.sampled_addmm": "sparse", "sparse.mm.reduce": "sparse", "to_sparse": "sparse",
    # Factory ops whose samples name the device "cpu" themselves: nothing reaches rgpu.
    **{n: "samples create on the cpu" for n in (
        "arange", "linspace", "linspace.tensor_overload", "logspace", "logspace.tensor_overload", "to", "ones",
        "zeros", "full", "eye", "empty_permuted", "scalar_tensor", "signal.windows.hamming", "signal.windows.hann",
        "signal.windows.bartlett", "signal.windows.blackman", "signal.windows.cosine", "signal.windows.exponential",
        "signal.windows.gaussian", "signal.windows.kaiser", "signal.windows.general_cosine",
        "signal.windows.general_hamming", "signal.windows.nuttall")},
    # Reads storage outside the view it was given; a copy to another device keeps only the view.
    "as_strided.partial_views": "needs the whole storage, not the view",
    # Its index tensor must stay on the cpu (as on CUDA); the harness moves every tensor.
    "tensor_split": "index tensor must be on the cpu",
}
# Ops whose later outputs are unused scratch in some modes, where the meta device promises a shape
# the cpu kernel does not make (batch norm's saved statistics in eval mode): the first is checked.
FIRST_OUTPUT_ONLY = {"native_batch_norm", "_native_batch_norm_legit"}
# Values that differ by design: uninitialised memory, randomness drawn in another order.
NONDETERMINISTIC = ("empty", "new_empty", "empty_like", "empty_strided", "new_empty_strided", "rand", "normal",
                    "bernoulli", "dropout", "multinomial", "pca_lowrank", "svd_lowrank", "uniform", "randint",
                    "randn", "cauchy", "exponential", "geometric", "log_normal")


def _name(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


OPS = [op for op in op_db if op.supports_dtype(torch.float32, "cpu")]


def to_dev(v):
    if isinstance(v, torch.Tensor):
        return v.to(D)
    if isinstance(v, (list, tuple)):
        return type(v)(to_dev(x) for x in v)
    if isinstance(v, dict):
        return {k: to_dev(x) for k, x in v.items()}
    return v


def compare(cpu, dev):
    if isinstance(cpu, torch.Tensor):
        assert isinstance(dev, torch.Tensor) and dev.device.type == D
        torch.testing.assert_close(dev.cpu(), cpu, equal_nan=True, atol=1e-4, rtol=1e-4)
    elif isinstance(cpu, (list, tuple)):
        assert len(cpu) == len(dev)
        for a, b in zip(cpu, dev):
            compare(a, b)
    else:
        assert cpu == dev or (cpu != cpu and dev != dev), (cpu, dev)


@pytest.mark.parametrize("op", OPS, ids=_name)
def test_op_db_parity(op):
    name = _name(op)
    if name in SKIP:
        pytest.skip(SKIP[name])
    checked = 0
    for sample in list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[:3]:
        torch.manual_seed(0)
        try:
            cpu = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue  # not a valid call on the cpu either
        torch.manual_seed(0)
        dev = op(to_dev(sample.input), *to_dev(sample.args), **to_dev(sample.kwargs))
        if any(k in op.name for k in NONDETERMINISTIC):
            torch.rgpu.synchronize()  # ran, and raised nothing
        elif name in FIRST_OUTPUT_ONLY:
            compare(cpu[0], dev[0])
        else:
            compare(cpu, dev)
        checked += 1
    if not checked:
        pytest.skip("no sample runs on the cpu")
