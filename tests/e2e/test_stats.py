"""RGPU_STATS: the shim writes call statistics as JSON at exit (format in client/stats.h)."""
import json

from conftest import BUILD, IMAGE, run_client

PROGRAM = str(BUILD / "bin/driver_api_test")


def _run_with_stats(server, tmp_path, **env):
    path = tmp_path / "stats.json"
    r = run_client([PROGRAM, IMAGE], server, env_extra={"RGPU_STATS": str(path), **env})
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(path.read_text())


def test_stats_file_counts_calls_bytes_and_waits(server, tmp_path):
    s = _run_with_stats(server, tmp_path)
    assert s["round_trips"] > 0
    assert s["oneway_calls"] > 0
    assert s["bytes_sent"] >= 37 << 20  # the program copies that much host to device
    assert s["bytes_received"] > 0
    assert len(s["ops"]) <= 20 and len(s["oneway_ops"]) <= 20
    assert all(o["waited"] == 0 for o in s["oneway_ops"])
    counts = [o["count"] for o in s["oneway_ops"]]
    assert counts == sorted(counts, reverse=True)
    ops = {o["op"]: o for o in s["ops"] + s["oneway_ops"]}
    totals = [o["total_wait_us"] for o in s["ops"]]
    assert totals == sorted(totals, reverse=True)
    for o in s["ops"]:
        assert o["waited"] <= o["count"]
        assert o["max_wait_us"] <= o["total_wait_us"]
    assert "cuLaunchKernel" in ops and ops["cuLaunchKernel"]["waited"] == 0
    assert ops["cuLaunchKernel"]["count"] > 0
    # "calls" holds every op, whether or not it made the top lists, with the same counts.
    for name, o in ops.items():
        assert s["calls"][name] == o["count"]
    assert s["round_trips"] + s["oneway_calls"] >= sum(s["calls"].values()) > 0
    assert "cuCtxSynchronize" in ops and ops["cuCtxSynchronize"]["waited"] > 0
    # The client's own time: the connection was opened (after the program started), images were
    # hashed and read, frames written.
    t = s["time_us"]
    assert set(t) == {"connect", "image_digest", "image_parse", "socket_write", "process_start_to_connect"}, t
    assert 0 < t["connect"] < 10_000_000 and t["image_digest"] > 0 and t["image_parse"] > 0, t
    assert t["socket_write"] > 0 and 0 < t["process_start_to_connect"] < 60_000_000, t


def test_stats_without_batching_counts_every_call_as_waiting(server, tmp_path):
    s = _run_with_stats(server, tmp_path, RGPU_BATCH="0")
    assert s["oneway_calls"] == 0
    assert all(o["waited"] == o["count"] for o in s["ops"])
    assert s["oneway_ops"] == []


def test_no_stats_file_without_the_variable(server, tmp_path):
    r = run_client([PROGRAM, IMAGE], server, env_extra={"RGPU_STATS": ""})
    assert r.returncode == 0, r.stdout + r.stderr
    assert not list(tmp_path.iterdir())


def test_the_device_snapshot_comes_with_the_handshake_not_asked(server, token_server, tmp_path):
    # rgpu-server pushes the snapshot right behind Welcome (kCapPushedSnapshot): cuInit waits for
    # no call of its own, with or without a token.
    script = tmp_path / "init.py"
    script.write_text("import ctypes, os\ncu = ctypes.CDLL(os.environ['SHIM'])\nn = ctypes.c_int()\n"
                      "assert cu.cuInit(0) == 0 and cu.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value == 1\n")
    for srv, token in ((server, None), (token_server, "correct horse battery staple")):
        path = tmp_path / "stats.json"
        r = run_client(["python3", str(script)], srv, token=token,
                       env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), "RGPU_STATS": str(path)})
        assert r.returncode == 0, r.stdout + r.stderr
        s = json.loads(path.read_text())
        assert s["round_trips"] == 0 and "control:16" not in s["calls"], s
