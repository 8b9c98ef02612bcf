"""CUDA graphs built node by node and JIT linking (tests/e2e/graph_test.c), end to end through the
shim to rgpu-server on the fake driver, memcpy nodes with host sides among them."""
from conftest import BUILD, IMAGE, run_client

PROGRAM = str(BUILD / "bin/graph_test")
PTX = str(BUILD / "tests/kernels/test_kernels.ptx")


def test_graph_program_passes_through_the_shim(server):
    r = run_client([PROGRAM, IMAGE, PTX], server)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "graph_test: all" in r.stdout and "checks passed" in r.stdout


def test_only_a_host_to_host_memcpy_node_is_refused_naming_the_call(server):
    """Host sides work (staged around each launch, or through the mapped copy; graph_test.c
    test_host_sides checks the bytes); host to host cannot, and says so once."""
    r = run_client([PROGRAM, IMAGE, PTX], server)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stderr.splitlines() if "cuGraphAddMemcpyNode" in l and "not supported by rgpu" in l]
    assert len(lines) == 1, r.stderr
    assert "host memory to host memory" in lines[0] and "CUDA_ERROR_NOT_SUPPORTED" in lines[0], lines[0]


def test_every_call_waiting_gives_the_same_results(server):
    r = run_client([PROGRAM, IMAGE, PTX], server, env_extra={"RGPU_BATCH": "0"})
    assert r.returncode == 0, r.stdout + r.stderr


def test_graph_calls_are_traced_by_name(server, tmp_path):
    trace = tmp_path / "trace.txt"
    r = run_client([PROGRAM, IMAGE, PTX], server, env_extra={"RGPU_TRACE": str(trace)})
    assert r.returncode == 0, r.stdout + r.stderr
    text = trace.read_text()
    for call in ("cuGraphAddKernelNode_v2", "cuGraphAddNode_v2", "cuGraphExecUpdate_v2", "cuLinkComplete"):
        assert call in text, call
    # Every failed call's result by name, even one the server's driver does not name (the fake
    # named only some: cuLinkComplete's CUDA_ERROR_INVALID_PTX read "? (218)").
    assert "cuLinkComplete -> CUDA_ERROR_INVALID_PTX (218)" in text, text
    assert "-> ? (" not in text


# ---------- hostile payloads for the graph handlers (every byte from the wire is hostile) ----------
import struct  # noqa: E402

import rgpu_wire as wire  # noqa: E402

CUDA_ERROR_NOT_SUPPORTED = 801
MEMORYTYPE_DEVICE, MEMORYTYPE_UNIFIED = 2, 4
NODE_TYPE_MEMCPY = 1


def memcpy3d(src_type, src_device, dst_type, dst_device, width):
    """A CUDA_MEMCPY3D (200 bytes): per side XInBytes, Y, Z, LOD, MemoryType (+4 pad), Host, Device,
    Array, reserved, Pitch, Height; then WidthInBytes, Height, Depth."""
    side = "<QQQQI4xQQQQQQ"
    return (struct.pack(side, 0, 0, 0, 0, src_type, 0, src_device, 0, 0, width, 1) +
            struct.pack(side, 0, 0, 0, 0, dst_type, 0, dst_device, 0, 0, width, 1) + struct.pack("<QQQ", width, 1, 1))


def new_graph(c):
    r = c.call(wire.OPS["cuGraphCreate"], struct.pack("<BI", 1, 0))
    assert r.result == 0, r
    return struct.unpack_from("<Q", r.body)[0]


def test_memcpy_node_naming_server_memory_is_refused_and_the_connection_stays(server):
    with wire.Conn(server.addr) as c:
        c.snapshot()
        c.make_context_current()
        g = new_graph(c)
        copy = memcpy3d(MEMORYTYPE_UNIFIED, 0x10000, MEMORYTYPE_DEVICE, 0x7e0000000000, 64)
        payload = struct.pack("<QQQBIQ", 0x100000, g, 0, 0, NODE_TYPE_MEMCPY, 0) + copy
        r = c.call(wire.OPS["cuGraphAddMemcpyNode"], payload)
        assert r.result == CUDA_ERROR_NOT_SUPPORTED, r
        r = c.call(wire.OPS["cuGraphGetNodes"], struct.pack("<QBBQ", g, 0, 0, 0))
        assert r.result == 0 and struct.unpack_from("<Q", r.body)[0] == 0, r
    assert server.alive()


def test_node_arrays_longer_than_their_payload_close_the_connection(server):
    for op, payload in (("cuGraphAddEmptyNode", struct.pack("<QQQ", 0x100000, 0x1000, 1 << 20)),
                        ("cuGraphGetNodes", struct.pack("<QBBQ", 0x1000, 1, 0, 1 << 21)),
                        ("cuGraphAddDependencies", struct.pack("<QQ", 0x1000, 1 << 19))):
        with wire.Conn(server.addr) as c:
            c.snapshot()
            c.send(wire.frame(wire.OPS[op], payload, 0, 7, 1))
            assert wire.peer_closed(c.sock), op
        assert server.alive()
    assert wire.healthy_session(server.addr) > 0


def test_host_copies_in_stream_capture_are_captured_not_refused(server, tmp_path):
    """cuMemcpy{HtoD,DtoH}Async and cuMemcpyAsync with a host side on a capturing stream (and on a
    stream joined through events) are captured through staging buffers (graph_test.c
    test_capture_host_copies checks the bytes per launch); cuStreamBeginCaptureToGraph and
    cuStreamUpdateCaptureDependencies_v2 go to the server (test_capture_to_graph)."""
    trace = tmp_path / "trace.txt"
    r = run_client([PROGRAM, IMAGE, PTX], server, env_extra={"RGPU_TRACE": str(trace)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "during stream capture" not in r.stderr, r.stderr
    text = trace.read_text()
    for call in ("cuStreamBeginCaptureToGraph", "cuStreamUpdateCaptureDependencies_v2", "cuMemcpyDtoDAsync_v2"):
        assert call in text, call
