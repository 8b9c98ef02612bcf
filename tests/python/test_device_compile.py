"""torch.compile on rgpu (python/rgpu/compile.py, opserver/graph.cpp): backend="rgpu" trains like
eager with a handful of messages per step; a graph with an operator the server refuses fails
with the server's message; the default backend says which backend to use."""
import pytest

from device_fixtures import ON_CUDA, opserver, use_opserver  # noqa: F401,E402  (fixtures; skips without torch)
import torch  # noqa: E402

import rgpu  # noqa: F401,E402

D = "rgpu"


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 4))


def _losses(step_fn, model, opt, steps):
    torch.manual_seed(1)
    data = [(torch.randn(8, 16).to(D), torch.randint(0, 4, (8,)).to(D)) for _ in range(steps)]
    out, counts = [], []
    for x, y in data:
        before = rgpu.stats()
        loss = step_fn(x, y)
        opt.step()
        opt.zero_grad(set_to_none=True)
        after = rgpu.stats()
        counts.append((after["posts"] - before["posts"], after["waits"] - before["waits"]))
        out.append(loss.item())
    return out, counts


def _train(compiled, steps=6):
    torch._dynamo.reset()
    model = _model().to(D)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    fwd = torch.compile(model, backend="rgpu") if compiled else model

    def step(x, y):
        loss = torch.nn.functional.cross_entropy(fwd(x), y)
        loss.backward()
        return loss

    return _losses(step, model, opt, steps)


def test_compiled_training_matches_eager_with_a_handful_of_messages():
    eager, eager_counts = _train(False)
    compiled, counts = _train(True)
    for a, b in zip(eager, compiled):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (eager, compiled)
    # After the first step (which compiles), a step is the forward graph, the backward graph, the
    # optimizer's ops and the frees' frames: posts are a handful (eager: one per op, 18 here), and
    # nothing waits (loss.item() is outside the counted span).
    eager_posts = eager_counts[-1][0]
    for posts, waits in counts[1:]:
        assert waits == 0, counts
        assert posts <= 12, counts
    assert counts[-1][0] < eager_posts, (counts, eager_counts)


def test_graph_with_an_operator_the_server_refuses_fails_with_its_message():
    torch._dynamo.reset()
    lib = torch.library.Library("rgpu_compile_test", "FRAGMENT")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")
    lib.impl("twice", lambda x: torch.empty_like(x), "Meta")

    def f(x):
        return torch.ops.rgpu_compile_test.twice(x + 1) - 1

    x = torch.ones(3, device=D)
    with pytest.raises(RuntimeError, match=r"compiled graph \d+.*rgpu_compile_test::twice is not one rgpu-opserver runs"):
        torch.compile(f, backend="rgpu")(x).cpu()


def test_numbers_where_the_schema_has_a_tensor_promote_as_in_eager():
    # AOTAutograd writes x * 2 as mul.Tensor(x, 2); the server refused the number ("expected
    # Tensor, got int") until it made it a wrapped number, as eager does.
    torch._dynamo.reset()

    def f(x, n):
        return (x * 2 + 1) / 4 - 0.5, n * 3 + 1, (n > 1) | True

    x, n = torch.arange(6.0, device=D), torch.arange(4, device=D)
    got = torch.compile(f, backend="rgpu")(x, n)
    expect = f(x.cpu(), n.cpu())
    for g, e in zip(got, expect):
        assert g.dtype == e.dtype  # float32 stays float32, int64 stays int64
        assert torch.equal(g.cpu(), e)


def test_default_backend_names_the_rgpu_backend():
    torch._dynamo.reset()
    model = torch.nn.Linear(4, 4).to(D)
    with pytest.raises(Exception, match=r'backend="rgpu"'):
        torch.compile(model)(torch.ones(2, 4, device=D))
