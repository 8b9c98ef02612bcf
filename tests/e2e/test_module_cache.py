"""The server's persistent module cache (docs/design.md §3, protocol/messages.h kOpModuleByHash):
the first run sends the module image and the server keeps it under its SHA-256; a second run asks by
hash and sends no image bytes."""
import hashlib
import json
import re
import struct
import time
from pathlib import Path

import pytest

import rgpu_wire as wire
from conftest import BUILD, IMAGE, Server, run_client

PROGRAM = str(BUILD / "bin/driver_api_test")
OP_MODULE_BY_HASH = wire.CONTROL["kOpModuleByHash"]
OP_PARAM_LAYOUT = wire.CONTROL["kOpParamLayout"]
CUDA_ERROR_NOT_FOUND = 500


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "module-cache"


@pytest.fixture
def cache_server(cache_dir):
    s = Server(extra_args=("--cache-dir", str(cache_dir)))
    yield s
    s.stop()


def _run(server, path, oneway_loads=True):
    env = {"RGPU_STATS": str(path)}
    if not oneway_loads:
        env["RGPU_ONEWAY_LOADS"] = "0"
    r = run_client([PROGRAM, IMAGE], server, env_extra=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(path.read_text())


def _cached(cache_dir):
    return sorted(p.name for p in cache_dir.iterdir())


def _by_hash_requests(stats):
    # "calls" counts every op; the "ops" lists keep only the top ones, by time waited.
    return stats["calls"].get(f"control:{OP_MODULE_BY_HASH}", 0)


def test_second_run_does_not_resend_the_image(cache_server, cache_dir, tmp_path):
    first = _run(cache_server, tmp_path / "first.json")
    names = _cached(cache_dir)
    assert names and all(re.fullmatch(r"[0-9a-f]{64}", n) for n in names), names
    for n in names:
        assert hashlib.sha256((cache_dir / n).read_bytes()).hexdigest() == n
    second = _run(cache_server, tmp_path / "second.json")
    assert _cached(cache_dir) == names
    saved = first["bytes_sent"] - second["bytes_sent"]
    image_bytes = sum((cache_dir / n).stat().st_size for n in names)
    # Every cached image was sent by the first run and not by the second, which sent a 58-byte
    # by-hash request per load instead (the first run knew from the index not to ask).
    requests = _by_hash_requests(second)
    assert requests > 0
    assert saved >= image_bytes - 58 * requests, (first["bytes_sent"], second["bytes_sent"], image_bytes)
    # No round trip to load code: loads of cubins for the GPU never wait, by hash or with bytes;
    # with RGPU_ONEWAY_LOADS=0 they do.
    loads = ("control:20", "cuModuleLoadData", "cuLibraryLoadData", "cuModuleLoadFatBinary")
    for run in (first, second):
        waited = {o["op"]: o["waited"] for o in run["ops"] if o["op"] in loads and o["waited"]}
        assert not waited, waited
    waiting = _run(cache_server, tmp_path / "third.json", oneway_loads=False)
    assert any(o["op"] in loads and o["waited"] for o in waiting["ops"]), waiting["ops"]


def test_an_edited_cache_file_is_checked_before_it_is_listed(cache_server, cache_dir, tmp_path):
    # A listed image is loaded without waiting, so the index must not list one that no longer
    # matches its hash: edited in place (same size, new bytes), it is dropped and sent again.
    _run(cache_server, tmp_path / "first.json")
    names = _cached(cache_dir)
    for n in names:
        data = bytearray((cache_dir / n).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (cache_dir / n).write_bytes(bytes(data))
    second = _run(cache_server, tmp_path / "second.json")
    assert _by_hash_requests(second) == 0
    for n in _cached(cache_dir):
        assert hashlib.sha256((cache_dir / n).read_bytes()).hexdigest() == n


def test_a_damaged_cache_file_is_resent_and_replaced(cache_server, cache_dir, tmp_path):
    _run(cache_server, tmp_path / "first.json")
    names = _cached(cache_dir)
    for n in names:
        (cache_dir / n).write_bytes(b"not the image")
    _run(cache_server, tmp_path / "second.json")
    for n in _cached(cache_dir):
        assert hashlib.sha256((cache_dir / n).read_bytes()).hexdigest() == n


def test_cache_none_turns_it_off(tmp_path):
    s = Server(extra_args=("--cache-dir", "none"))
    try:
        first = _run(s, tmp_path / "first.json")
        second = _run(s, tmp_path / "second.json")
        assert abs(first["bytes_sent"] - second["bytes_sent"]) < Path(IMAGE).stat().st_size
    finally:
        s.stop()


def test_by_hash_answers_not_found_then_loads_once_cached(cache_server):
    image = Path(IMAGE).read_bytes()
    digest = hashlib.sha256(image).digest()
    load = wire.OPS["cuModuleLoadData"]
    with wire.Conn(cache_server.addr) as c:
        c.snapshot()
        c.make_context_current()
        r = c.call(OP_MODULE_BY_HASH, wire.module_by_hash(0x2000, load, digest))
        assert r.result == CUDA_ERROR_NOT_FOUND, r
        r = c.call(load, wire.image_load(0x2000, image))
        assert r.result == wire.CUDA_SUCCESS, r
        r = c.call(OP_MODULE_BY_HASH, wire.module_by_hash(0x2001, load, digest))
        assert r.result == wire.CUDA_SUCCESS, r
        # A load op that is not a module or library load is refused, the connection stays.
        r = c.call(OP_MODULE_BY_HASH, struct.pack("<QH", 0x2002, wire.OPS["cuMemAlloc_v2"]) + digest)
        assert r.result == wire.CUDA_ERROR_INVALID_VALUE, r
        assert c.mem_get_info()[0] == wire.CUDA_SUCCESS


@pytest.mark.parametrize("length", [0, 8, 10, 41])
def test_truncated_by_hash_request_closes_only_that_connection(cache_server, length):
    payload = (struct.pack("<QH", 0x2000, wire.OPS["cuModuleLoadData"]) + bytes(32))[:length]
    with wire.Conn(cache_server.addr) as c:
        c.snapshot()
        c.send(wire.frame(OP_MODULE_BY_HASH, payload, 0, 7, 1))
        assert wire.peer_closed(c.sock)
    deadline = time.time() + 5
    while "malformed arguments" not in cache_server.text() and time.time() < deadline:
        time.sleep(0.05)
    assert "malformed arguments" in cache_server.text()
    assert cache_server.alive()
    assert wire.healthy_session(cache_server.addr) > 0
    r = run_client([PROGRAM, IMAGE], cache_server)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_client_asks_by_hash_only_for_images_the_server_holds(cache_server, tmp_path):
    # The cache index comes with the connect-time snapshot: a cold cache costs no by-hash round
    # trip (the bytes go at once), a warm one answers every load by hash.
    first = _run(cache_server, tmp_path / "first.json")
    assert _by_hash_requests(first) == 0, first
    second = _run(cache_server, tmp_path / "second.json")
    assert _by_hash_requests(second) > 0, second
    assert second["round_trips"] <= first["round_trips"], (first["round_trips"], second["round_trips"])


def test_a_whole_parameter_layout_comes_in_one_answer(cache_server):
    # kOpParamLayout: what the client asks when it could not read a kernel's layout from the
    # image, instead of one round trip per parameter.
    image = Path(IMAGE).read_bytes()
    with wire.Conn(cache_server.addr) as c:
        c.snapshot()
        c.make_context_current()
        r = c.call(wire.OPS["cuModuleLoadData"], wire.image_load(0x3000, image))
        assert r.result == wire.CUDA_SUCCESS, r
        r = c.call(wire.OPS["cuModuleGetFunction"], wire.symbol_lookup(0x3001, 0x3000, "rgpu_vec_add"))
        assert r.result == wire.CUDA_SUCCESS, r
        r = c.call(OP_PARAM_LAYOUT, wire.param_layout_ask(0x3001, 0))
        assert r.result == wire.CUDA_SUCCESS, r
        (n,) = struct.unpack_from("<I", r.body)
        params = [struct.unpack_from("<QQ", r.body, 4 + 16 * i) for i in range(n)]
        end, kind = struct.unpack_from("<iB", r.body, 4 + 16 * n)
        # rgpu_vec_add(const float* a, const float* b, float* c, int n)
        assert params == [(0, 8), (8, 8), (16, 8), (24, 4)], params
        assert (end, kind) == (wire.CUDA_ERROR_INVALID_VALUE, 0)
        # A library's CUkernel: the function reading refuses it, "either" answers as a kernel.
        r = c.call(wire.OPS["cuLibraryLoadData"], wire.image_load(0x3100, image))
        assert r.result == wire.CUDA_SUCCESS, r
        r = c.call(wire.OPS["cuLibraryGetKernel"], wire.symbol_lookup(0x3101, 0x3100, "rgpu_vec_add"))
        assert r.result == wire.CUDA_SUCCESS, r
        r = c.call(OP_PARAM_LAYOUT, wire.param_layout_ask(0x3101, 0))
        assert r.result == wire.CUDA_SUCCESS and r.body[:4] == b"\0\0\0\0", r
        assert struct.unpack_from("<iB", r.body, 4) == (wire.CUDA_ERROR_INVALID_HANDLE, 0)
        r = c.call(OP_PARAM_LAYOUT, wire.param_layout_ask(0x3101, 2))
        assert r.result == wire.CUDA_SUCCESS, r
        (n,) = struct.unpack_from("<I", r.body)
        assert n == 4 and struct.unpack_from("<iB", r.body, 4 + 16 * n) == (wire.CUDA_ERROR_INVALID_VALUE, 1), r
        r = c.call(OP_PARAM_LAYOUT, wire.param_layout_ask(0x3101, 3))  # no such kind
        assert r.result == wire.CUDA_ERROR_INVALID_VALUE, r
        # An id the session never bound: refused, the connection stays.
        r = c.call(OP_PARAM_LAYOUT, wire.param_layout_ask(0x3999, 1))
        assert r.result == wire.CUDA_ERROR_INVALID_HANDLE, r
        assert c.mem_get_info()[0] == wire.CUDA_SUCCESS
