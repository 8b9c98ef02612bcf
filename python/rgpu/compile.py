"""torch.compile(model, backend="rgpu"): each FX graph AOTAutograd captures (forward, backward)
becomes one program the opserver keeps (protocol/torch_wire.h kTorchGraph), and each call of it
one message (kTorchGraphRun): the inputs' storages, and storage ids minted here for the results,
whose layouts come from the graph's own metadata (node.meta["val"]), so a step costs a handful of
one-way messages instead of one per op, and no meta run.

The opserver compiles each graph with its own Inductor at the graph's first run and runs the
generated code (fused kernels) from then on, or runs it op by op (`rgpu-opserver --compile none`,
a graph Inductor refuses: opserver/inductor.h); the client sends and binds the same either way.

A graph that cannot be serialized (a Python-level op, a tensor constant, a non-tensor result)
runs as it would under backend="aot_eager", op by op, with a warning naming why.
"""
import functools
import itertools
import operator
import struct
import warnings

import torch

# c10::ScalarType numbering (what the wire carries for dtypes).
_SCALAR_TYPE = {
    torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4, torch.float16: 5,
    torch.float32: 6, torch.float64: 7, torch.complex32: 8, torch.complex64: 9, torch.complex128: 10,
    torch.bool: 11, torch.bfloat16: 15, torch.float8_e5m2: 23, torch.float8_e4m3fn: 24,
    torch.uint16: 27, torch.uint32: 28, torch.uint64: 29,
}
_MEMORY_FORMAT = {torch.contiguous_format: 0, torch.preserve_format: 1, torch.channels_last: 2,
                  torch.channels_last_3d: 3}
# protocol/torch_wire.h
_NONE, _BOOL, _INT, _DOUBLE, _COMPLEX, _STRING, _DEVICE, _LIST = range(8)
_GRAPH_INPUT, _GRAPH_NODE = 11, 12
_REMOTE, _HOST, _META = 0, 1, 2

_ids = itertools.count(1)


class Unsupported(Exception):
    """The graph holds something this backend does not send; it runs op by op instead."""


def _str(s):
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def _value(v, refs):
    if v is None:
        return bytes([_NONE])
    if isinstance(v, torch.fx.Node):
        if v not in refs:
            raise Unsupported(f"node {v.name} ({v.op} {v.target}) is not an aten op's result")
        return refs[v]
    if isinstance(v, bool):
        return struct.pack("<BB", _BOOL, v)
    if isinstance(v, int):
        return struct.pack("<Bq", _INT, v)
    if isinstance(v, float):
        return struct.pack("<Bd", _DOUBLE, v)
    if isinstance(v, complex):
        return struct.pack("<Bdd", _COMPLEX, v.real, v.imag)
    if isinstance(v, str):
        return bytes([_STRING]) + _str(v)
    if isinstance(v, torch.dtype):
        return struct.pack("<Bq", _INT, _SCALAR_TYPE[v])
    if isinstance(v, torch.layout):
        if v != torch.strided:
            raise Unsupported(f"layout {v}")
        return struct.pack("<Bq", _INT, 0)
    if isinstance(v, torch.memory_format):
        return struct.pack("<Bq", _INT, _MEMORY_FORMAT[v])
    if isinstance(v, torch.device):
        if v.type == "rgpu":
            return struct.pack("<BBb", _DEVICE, _REMOTE, v.index if v.index is not None else torch.rgpu.current_device())
        if v.type in ("cpu", "meta"):
            return struct.pack("<BBb", _DEVICE, _HOST if v.type == "cpu" else _META, -1)
        raise Unsupported(f"device {v}")
    if isinstance(v, (list, tuple)):
        return struct.pack("<BI", _LIST, len(v)) + b"".join(_value(e, refs) for e in v)
    raise Unsupported(f"a constant of type {type(v).__name__}")


def serialize(gm, graph_id):
    """The kTorchGraph payload of an aten-level FX graph, and what a run needs to know: per
    graph result, a placeholder's index (returned as is, not sent back) or its metadata."""
    refs, nodes, ninputs = {}, [], 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            refs[node] = struct.pack("<BI", _GRAPH_INPUT, ninputs)
            ninputs += 1
        elif node.op == "call_function" and node.target is operator.getitem:
            src, i = node.args
            if src not in refs or not isinstance(i, int):
                raise Unsupported(f"getitem of {src}")
            head = refs[src]
            if head[0] != _GRAPH_NODE or struct.unpack("<i", head[9:13])[0] != -1:
                raise Unsupported("getitem of a getitem")
            index = struct.unpack("<I", head[1:5])[0]
            rets = src.target._schema.returns
            if len(rets) == 1 and isinstance(rets[0].type, torch.ListType):
                refs[node] = struct.pack("<BIIi", _GRAPH_NODE, index, 0, i)
            else:
                refs[node] = struct.pack("<BIIi", _GRAPH_NODE, index, i, -1)
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            schema = node.target._schema
            args = []
            for k, a in enumerate(schema.arguments):
                if k < len(node.args) and not a.kwarg_only:
                    args.append(node.args[k])
                elif a.name in node.kwargs:
                    args.append(node.kwargs[a.name])
                elif a.has_default_value():
                    args.append(a.default_value)
                else:
                    raise Unsupported(f"{schema.name} without argument {a.name}")
            nodes.append(_str(schema.name) + _str(schema.overload_name) + struct.pack("<I", len(args)) +
                         b"".join(_value(v, refs) for v in args))
            refs[node] = struct.pack("<BIIi", _GRAPH_NODE, len(nodes) - 1, 0, -1)
        elif node.op == "output":
            results = node.args[0]
            results = list(results) if isinstance(results, (list, tuple)) else [results]
        else:
            raise Unsupported(f"{node.op} {node.target}")
    plan, meta = [], []
    for r in results:
        if r is None:
            plan.append(("none", None))
            meta.append(-1)
        elif isinstance(r, torch.fx.Node) and r.op == "placeholder":
            plan.append(("input", refs[r]))
            meta.append(-1)
        elif isinstance(r, torch.fx.Node) and isinstance(r.meta.get("val"), torch.Tensor):
            v = r.meta["val"]
            if v.dtype not in _SCALAR_TYPE:
                raise Unsupported(f"a result of dtype {v.dtype}")
            plan.append(("sent", None))
            meta += [_SCALAR_TYPE[v.dtype], v.dim(), *v.shape, *v.stride(), v.storage_offset()]
        else:
            raise Unsupported(f"a graph result that is not a tensor ({r})")
    payload = (struct.pack("<QII", graph_id, ninputs, len(nodes)) + b"".join(nodes) +
               struct.pack("<I", len(results)) + b"".join(_value(r, refs) for r in results))
    return payload, plan, [int(m) for m in meta]


def _input_index(ref):
    return struct.unpack("<I", ref[1:5])[0]


def compile_graph(gm, example_inputs):
    """An FX graph's compiled function: one kTorchGraphRun per call."""
    graph_id = next(_ids)
    try:
        payload, plan, meta = serialize(gm, graph_id)
        for node in gm.graph.nodes:
            val = node.meta.get("val")
            if node.op == "placeholder" and not (isinstance(val, torch.Tensor) and val.device.type == "rgpu"):
                raise Unsupported(f"input {node.name} is not an rgpu tensor")
    except Unsupported as e:
        warnings.warn(f"rgpu: torch.compile: this graph runs op by op ({e})", stacklevel=2)
        return gm.forward
    devices = {n.meta["val"].device for n in gm.graph.nodes if n.op == "placeholder"}
    if len(devices) > 1:
        warnings.warn("rgpu: torch.compile: a graph over several devices runs op by op", stacklevel=2)
        return gm.forward
    device = next(iter(devices), torch.device("rgpu", 0))
    index = device.index if device.index is not None else 0
    torch.ops.rgpu.graph_define(torch.frombuffer(bytearray(payload), dtype=torch.uint8))

    def run(*args):
        sent = iter(torch.ops.rgpu.graph_run(graph_id, index, list(args), meta))
        out = []
        for kind, ref in plan:
            if kind == "sent":
                out.append(next(sent))
            elif kind == "input":
                out.append(args[_input_index(ref)])
            else:
                out.append(None)
        return out

    return run


def _backend():
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def compiler(gm, example_inputs):
        return make_boxed_func(compile_graph(gm, example_inputs))

    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler)


def register():
    """Adds backend="rgpu" to torch.compile: at the first torch.compile call (importing
    torch._dynamo and torch._inductor costs seconds, which `import rgpu` should not), or now
    when torch._dynamo is imported already."""
    import sys

    if "torch._dynamo" in sys.modules:
        return _register_now()
    original = torch.compile

    @functools.wraps(original)
    def compile(*args, **kwargs):
        _register_now()
        return original(*args, **kwargs)

    torch.compile = compile


_registered = False


def _register_now():
    global _registered
    if _registered:
        return
    _registered = True
    from torch._dynamo import register_backend

    backend = None

    def rgpu(gm, example_inputs, **kwargs):
        nonlocal backend
        if backend is None:
            backend = _backend()
        return backend(gm, example_inputs, **kwargs)

    register_backend(rgpu, name="rgpu")
    _refuse_inductor()


_USE_RGPU = ('rgpu: the default torch.compile backend (inductor) does not generate code for rgpu; use '
             'torch.compile(model, backend="rgpu"), which runs each captured graph on the opserver as one call')


class _Refuse(type):
    def __getattr__(cls, name):
        raise RuntimeError(_USE_RGPU)


class _NoInductor(metaclass=_Refuse):
    """Inductor's scheduling and wrapper codegen for rgpu: refuse at first use, naming the backend
    to use."""

    @classmethod
    def create(cls, *args, **kwargs):
        raise RuntimeError(_USE_RGPU)

    def __init__(self, *args, **kwargs):
        raise RuntimeError(_USE_RGPU)


def _refuse_inductor():
    from torch._inductor.codegen.common import register_backend_for_device

    register_backend_for_device("rgpu", _NoInductor, _NoInductor)
