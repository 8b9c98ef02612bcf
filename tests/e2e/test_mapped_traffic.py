"""Mapped host memory costs what the program wrote, not what it mapped (tests/e2e/mapped_traffic_test.c).

The program maps 64 MiB, writes a few bytes per round and copies the whole buffer to the device
and back, sync and async. Before, every exchange compared and sent the whole buffer (NVIDIA's
simpleStreams did not finish in 30 s): here the bytes on the wire stay near what was written,
whatever the buffer's size, and each synchronous copy is one round trip."""
import json

from conftest import BUILD, run_client

PROGRAM = str(BUILD / "bin/mapped_traffic_test")
MIB = 1 << 20


def _run(server, tmp_path, mib, rounds, **env):
    path = tmp_path / "stats.json"
    r = run_client([PROGRAM, str(mib), str(rounds)], server, env_extra={"RGPU_STATS": str(path), **env})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mapped_traffic_test: all" in r.stdout
    return json.loads(path.read_text())


def test_traffic_follows_what_the_program_wrote(server, tmp_path):
    rounds = 20
    s = _run(server, tmp_path, 64, rounds)
    # 20 rounds each copy 64 MiB out of and back into mapped memory four times (about 5 GiB if
    # the buffer travelled); the program writes a few pages per round, one page by read(2), and
    # 4 MiB of registered memory holds one non-zero page when registered.
    assert s["bytes_sent"] < 2 * MIB, s
    assert s["bytes_received"] < 1 * MIB, s
    # The copies into and out of mapped memory ran on the server's copy of the buffer.
    assert s["calls"].get("control:40", 0) >= 4 * rounds, s["calls"]
    assert "cuMemcpyDtoHAsync_v2" not in s["calls"], s["calls"]
    # One round trip per synchronous copy or synchronize, none per exchange of pages.
    assert s["round_trips"] < 8 * rounds, s
    assert server.alive()


def test_traffic_does_not_grow_with_the_buffer(server, tmp_path):
    small = _run(server, tmp_path, 8, 10)
    large = _run(server, tmp_path, 128, 10)
    assert large["bytes_sent"] < small["bytes_sent"] + 256 * 1024, (small, large)
    assert large["bytes_received"] < small["bytes_received"] + 256 * 1024, (small, large)
    assert large["round_trips"] == small["round_trips"], (small, large)


def test_every_call_waiting_gives_the_same_results(server, tmp_path):
    s = _run(server, tmp_path, 16, 5, RGPU_BATCH="0")
    assert s["bytes_sent"] < 2 * MIB and s["bytes_received"] < 1 * MIB, s


def test_without_userfaultfd_pages_are_compared_and_traffic_is_the_same(server, tmp_path):
    """Where the kernel cannot track writes (here: a seccomp filter refuses userfaultfd, as some
    container profiles do), the client compares pages instead: slower per call, same traffic."""
    path = tmp_path / "stats.json"
    wrapper = str(BUILD / "bin/no_userfaultfd")
    r = run_client([wrapper, PROGRAM, "64", "20"], server, env_extra={"RGPU_STATS": str(path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mapped_traffic_test: all" in r.stdout
    assert "cannot track writes (userfaultfd" in r.stderr, r.stderr
    s = json.loads(path.read_text())
    assert s["bytes_sent"] < 2 * MIB and s["bytes_received"] < 1 * MIB, s
