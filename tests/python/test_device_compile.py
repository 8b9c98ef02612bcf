"""torch.compile on rgpu (python/rgpu/compile.py, opserver/graph.cpp, opserver/inductor.h):
backend="rgpu" trains like eager with a handful of messages per step, each graph compiled by
Inductor on the server (its log says so per graph); `--compile none` runs graphs op by op, and so
does a graph Inductor refuses or a server whose Python does not start, each said once in the log;
results Inductor lays out otherwise than the client recorded are copied into the client's layout;
an error in Inductor's code reaches the client; a graph with an operator the server refuses fails
with the server's message; the default backend says which backend to use.

Inductor compiles on the server's CPU take seconds each (a C++ compiler runs): the graphs here are
few and small."""
import re
import time

import pytest

from device_fixtures import ON_CUDA, OpServer, opserver, run_python, use_opserver  # noqa: F401,E402  (fixtures; skips without torch)
import torch  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import rgpu  # noqa: F401,E402
import rgpu.compile  # noqa: E402

D = "rgpu"


def _log_mark(server):
    return server.log_path.stat().st_size


def _log_since(server, mark):
    with open(server.log_path) as f:
        f.seek(mark)
        return f.read()


def _define(fn, *example):
    """Sends the aten graph of fn (traced on the cpu) as a compiled graph; returns its id. Runs go
    through _run, which names the results' layouts itself, as compile.py does from the graph's
    metadata: here they may differ from what Inductor makes, and one graph may be run with other
    inputs than it was compiled for, which torch.compile's guards never do."""
    gm = make_fx(fn)(*example)
    graph_id = next(rgpu.compile._ids)
    payload, _, _ = rgpu.compile.serialize(gm, graph_id)
    torch.ops.rgpu.graph_define(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
    return graph_id


def _run(graph_id, inputs, layouts):
    """One run: inputs on rgpu, layouts (sizes, strides, dtype) of the results the client takes."""
    meta = []
    for sizes, strides, dtype in layouts:
        meta += [rgpu.compile._SCALAR_TYPE[dtype], len(sizes), *sizes, *strides, 0]
    return torch.ops.rgpu.graph_run(graph_id, 0, inputs, meta)


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


def test_compiled_training_matches_eager_with_a_handful_of_messages(opserver):
    eager, eager_counts = _train(False)
    mark = _log_mark(opserver)
    compiled, counts = _train(True)
    # The server compiled the forward and the backward graph with Inductor and ran its code.
    log = _log_since(opserver, mark)
    assert len(re.findall(r"graph \d+: compiled by Inductor", log)) == 2, log
    assert "op by op" not in log, log
    # Inductor's fused kernels sum in their own order: close to eager, not bitwise.
    for a, b in zip(eager, compiled):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), (eager, compiled)
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


def test_results_inductor_lays_out_otherwise_are_copied_into_the_clients_layout(opserver):
    mark = _log_mark(opserver)
    graph_id = _define(lambda x: x * 2 + 1, torch.zeros(4, 6))
    x = torch.arange(24.0).view(4, 6)
    # The client says column-major; Inductor writes a fresh row-major buffer.
    (out,) = _run(graph_id, [x.to(D)], [((4, 6), (1, 4), torch.float32)])
    assert out.stride() == (1, 4)
    assert torch.equal(out.cpu(), x * 2 + 1)
    assert f"graph {graph_id}: compiled by Inductor" in _log_since(opserver, mark)
    # Inputs of another shape than it was compiled for (torch.compile's guards never send them,
    # a hostile client may): op by op, said once.
    for n in (5, 7):
        y = torch.arange(2.0 * n).view(2, n)
        (out,) = _run(graph_id, [y.to(D)], [((2, n), (n, 1), torch.float32)])
        assert torch.equal(out.cpu(), y * 2 + 1)
    log = _log_since(opserver, mark)
    assert log.count(f"graph {graph_id}: a run's inputs differ") == 1, log


def test_a_graph_inductor_refuses_runs_op_by_op_saying_so_once(opserver):
    # nonzero's result shape depends on the data: Inductor refuses it without dynamic shapes.
    x = torch.tensor([0.0, 3.0, 0.0, 5.0])
    mark = _log_mark(opserver)
    graph_id = _define(torch.nonzero, x)
    for _ in range(2):
        (out,) = _run(graph_id, [x.to(D)], [((2, 1), (1, 1), torch.int64)])
        assert torch.equal(out.cpu(), torch.nonzero(x))
    log = _log_since(opserver, mark)
    assert len(re.findall(rf"graph {graph_id} runs op by op: .*nonzero", log)) == 1, log
    assert f"graph {graph_id}: compiled" not in log


@pytest.mark.skipif(ON_CUDA, reason="an index out of bounds is a device-side assert on cuda, which ends the "
                    "session's CUDA context (as in eager)")
def test_an_error_in_inductors_code_reaches_the_client(opserver):
    w = torch.randn(10, 4)
    graph_id = _define(lambda i, w: torch.nn.functional.embedding(i, w), torch.tensor([1, 2]), w)
    wd = w.to(D)
    (out,) = _run(graph_id, [torch.tensor([1, 2]).to(D), wd], [((2, 4), (4, 1), torch.float32)])
    assert torch.equal(out.cpu(), w[[1, 2]])
    (out,) = _run(graph_id, [torch.tensor([1, 12]).to(D), wd], [((2, 4), (4, 1), torch.float32)])
    with pytest.raises(RuntimeError, match=rf"compiled graph {graph_id}.*Inductor.*index out of bounds"):
        out.cpu()
    # The session goes on.
    assert torch.equal((wd * 2).cpu(), w * 2)


_TWO_GRAPHS = """
import torch, rgpu
f = torch.compile(lambda x: (x * 2).sin() + 1, backend="rgpu")
g = torch.compile(lambda x: x.cos() * 3, backend="rgpu")
x = torch.arange(6.0, device="rgpu")
ok = True
for _ in range(2):
    ok &= torch.allclose(f(x).cpu(), (torch.arange(6.0) * 2).sin() + 1)
    ok &= torch.allclose(g(x).cpu(), torch.arange(6.0).cos() * 3)
print(ok)
"""


def _two_graphs_on(server):
    r = run_python(_TWO_GRAPHS, {"RGPU_OPSERVER": server.addr})
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stdout + r.stderr
    # The session logs its graphs' summaries as it ends, a moment after its client has gone.
    deadline = time.time() + 20
    while "ended" not in server.log_path.read_text() and time.time() < deadline:
        time.sleep(0.05)
    return server.log_path.read_text()


def test_compile_none_runs_graphs_op_by_op():
    server = OpServer(extra_args=["--compile", "none"])
    try:
        log = _two_graphs_on(server)
    finally:
        server.stop()
    assert "compiled graphs op by op (--compile none)" in log, log
    assert "Inductor started" not in log and "compiled by Inductor" not in log, log  # Python never started
    assert len(re.findall(r"graph \d+: 2 runs \(0 by Inductor, 2 op by op\)", log)) == 2, log


def test_a_server_whose_python_does_not_start_runs_graphs_op_by_op_saying_so_once(monkeypatch):
    monkeypatch.setenv("RGPU_OPSERVER_PYTHON", "/nonexistent/bin/python")
    server = OpServer()
    try:
        log = _two_graphs_on(server)
    finally:
        server.stop()
    lines = re.findall(r"graph \d+ runs op by op: .*", log)
    assert len(lines) == 1 and "/nonexistent/bin/python" in lines[0] and "RGPU_OPSERVER_PYTHON" in lines[0], log
    assert len(re.findall(r"graph \d+: 2 runs \(0 by Inductor, 2 op by op\)", log)) == 2, log
