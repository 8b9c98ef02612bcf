"""Inductor inside rgpu-opserver (opserver/inductor.cpp runs this module in the Python it embeds).

The C++ side decodes and checks a compiled graph (kTorchGraph, opserver/graph.cpp) once, with the
one decoder of those bytes that the fuzz target exercises, and hands this module the checked
structure instead of the bytes: per node the operator's name, overload and every argument, the
constants already typed by the schema (dtypes, layouts, memory formats and devices as torch's
objects), references as tuples. Here it becomes an aten-level FX graph again, as AOTAutograd made
it on the client, and Inductor compiles that with the first run's real inputs as example inputs.

A reference is ("input", i) or ("node", node, ret, elem): the i-th graph input; the ret-th return of
an earlier node, or the elem-th element of that return when it is a list (elem -1: all of it).
Lists of constants are Python lists.
"""
import operator
import os
import sys

torch = None  # imported by start(), after the check of where it comes from


def start(torch_lib_dir):
    """Imports torch, refusing one other than the torch this process links: its libraries are in
    the process already, and a second torch's extension would run against them."""
    global torch
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise ImportError(f"this Python ({sys.executable}) has no torch; rgpu-opserver links the torch in "
                          f"{torch_lib_dir}: set RGPU_OPSERVER_PYTHON to the python of that environment")
    found = os.path.realpath(os.path.join(os.path.dirname(spec.origin), "lib"))
    if found != os.path.realpath(torch_lib_dir):
        raise ImportError(f"this Python ({sys.executable}) finds torch in {os.path.dirname(found)}, but rgpu-opserver "
                          f"links the torch in {os.path.dirname(torch_lib_dir)}: set RGPU_OPSERVER_PYTHON to the "
                          "python of that environment")
    import torch as _torch

    torch = _torch
    import torch._inductor.config as config
    from torch._inductor.compile_fx import compile_fx  # noqa: F401  (the import costs seconds: here, once)

    # Compile in this process: a pool of compile workers would be processes started from a session
    # process and outliving it when the session ends abruptly.
    config.compile_threads = 1
    # Generated code checks indirect indices (embedding, gather) as the eager kernels do: every
    # graph comes from the network.
    config.assert_indirect_indexing = True
    # For the log: what started, and the executable Inductor's helper processes run (its check of
    # the CPU's vector instructions starts one), which must be this environment's python.
    return f"Python {sys.version.split()[0]} ({sys.executable}), torch {_torch.__version__}"


def _operator(name, overload):
    namespace, op = name.split("::", 1)
    return getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")


def compile_graph(graph_id, nodes, outputs, example_inputs):
    """The compiled callable of one graph: nodes is a list of (name, overload, args), outputs the
    graph's results (references or constants), example_inputs the first run's inputs."""
    from torch._inductor.compile_fx import compile_fx

    g = torch.fx.Graph()
    inputs = [g.placeholder(f"input_{i}") for i in range(len(example_inputs))]
    made = []  # per node: its FX node and its operator's returns
    items = {}  # (node, ret, elem) -> its getitem node, made once

    def ref(v):
        if v[0] == "input":
            return inputs[v[1]]
        _, n, ret, elem = v
        x, returns = made[n]
        if len(returns) > 1:
            key = (n, ret, -1)
            if key not in items:
                items[key] = g.call_function(operator.getitem, (x, ret))
            x = items[key]
        elif ret != 0:
            raise ValueError(f"node {n} has one return; the graph reads its return {ret}")
        if elem >= 0:
            key = (n, ret, elem)
            if key not in items:
                items[key] = g.call_function(operator.getitem, (x, elem))
            x = items[key]
        return x

    def value(v):
        if isinstance(v, tuple):
            return ref(v)
        if isinstance(v, list):
            return [value(e) for e in v]
        return v

    for name, overload, args in nodes:
        op = _operator(name, overload)
        positional, keywords = [], {}
        for a, v in zip(op._schema.arguments, args):
            if a.kwarg_only:
                keywords[a.name] = value(v)
            else:
                positional.append(value(v))
        made.append((g.call_function(op, tuple(positional), keywords), op._schema.returns))
    g.output(tuple(value(o) for o in outputs))
    gm = torch.fx.GraphModule(torch.nn.Module(), g, class_name=f"RgpuGraph{graph_id}")
    return compile_fx(gm, list(example_inputs))


def describe_error(e):
    """(kind, one line, the whole traceback) of an exception, for opserver/inductor.cpp: the kind
    names the class the client raises (protocol/torch_wire.h ErrorKind), the line goes to the log
    or the client, the traceback to the debug log."""
    import traceback

    text = str(e).strip()
    # Inductor wraps what failed in a long message (and a traceback in text): its first line says
    # what went wrong.
    line = f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"
    if len(line) > 400:
        line = line[:400] + " ..."
    return _error_kind(e), line, "".join(traceback.format_exception(e))


def _error_kind(e):
    if isinstance(e, torch.OutOfMemoryError):
        return "out_of_memory"
    if isinstance(e, torch.linalg.LinAlgError):
        return "linalg"
    if isinstance(e, getattr(torch, "AcceleratorError", ())):
        return "accelerator"
    for cls, kind in ((NotImplementedError, "not_implemented"), (IndexError, "index"), (ValueError, "value"),
                      (TypeError, "type")):
        if isinstance(e, cls):
            return kind
    return "runtime"
