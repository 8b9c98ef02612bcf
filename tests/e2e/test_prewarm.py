"""The spare session process (protocol/accept_loop.h) and what it does before its client arrives
(server/prewarm.h): the driver's init and device 0's primary context, held so that the client's
first retain takes it over. The client must not be able to tell, except by the time it saves."""
import signal
import struct
import subprocess
import time

import rgpu_wire as wire
from conftest import BUILD, IMAGE, Server, run_client
from test_hostile import wait_for_log

CU_CTX_SCHED_BLOCKING_SYNC = 4


def test_the_held_context_is_the_clients_own_and_its_last_release_destroys_it(server):
    with wire.Conn(server.addr) as c:
        c.snapshot()
        c.make_context_current()
        _, free0, _ = c.mem_get_info()
        r = c.call(wire.OPS["cuMemAlloc_v2"], struct.pack("<BQ", 1, 64 << 20))
        assert r.result == wire.CUDA_SUCCESS, r
        assert c.mem_get_info()[1] == free0 - (64 << 20)
        # The client's only reference: without the hand-over the spare's would keep the context
        # (and the 64 MiB) alive.
        assert c.call(wire.OPS["cuDevicePrimaryCtxRelease_v2"], struct.pack("<i", 0)).result == wire.CUDA_SUCCESS
        c.make_context_current()
        assert c.mem_get_info()[1] == free0


def test_flags_set_before_the_first_retain_are_the_contexts_flags(server):
    with wire.Conn(server.addr) as c:
        c.snapshot()
        r = c.call(wire.OPS["cuDevicePrimaryCtxSetFlags_v2"], struct.pack("<iI", 0, CU_CTX_SCHED_BLOCKING_SYNC))
        assert r.result == wire.CUDA_SUCCESS, r
        c.make_context_current()
        r = c.call(wire.OPS["cuCtxGetFlags"], b"\x01")
        assert r.result == wire.CUDA_SUCCESS, r
        assert struct.unpack_from("<I", r.body)[0] & 0x7 == CU_CTX_SCHED_BLOCKING_SYNC


def test_with_prewarm_none_a_session_starts_cold():
    s = Server(extra_args=["--prewarm", "none"])
    try:
        with wire.Conn(s.addr) as c:
            # Nothing ran in the session before its client: not even cuInit.
            assert c.mem_get_info()[0] == wire.CUDA_ERROR_NOT_INITIALIZED
    finally:
        s.stop()


def spares_of(server):
    out = subprocess.run(["pgrep", "-P", str(server.proc.pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_a_spare_waits_warm_and_one_that_dies_unused_is_replaced():
    s = Server(extra_args=["--log-level", "debug"])
    try:
        wait_for_log(s, "device 0's context held")
        deadline = time.time() + 30
        while len(spares_of(s)) != 1 and time.time() < deadline:  # the start-up port check's session ends
            time.sleep(0.05)
        (spare,) = spares_of(s)
        subprocess.run(["kill", "-KILL", str(spare)], check=True)
        wait_for_log(s, f"spare session process {spare} ended before any client came; starting another")
        r = run_client([str(BUILD / "bin/driver_api_test"), IMAGE], s)
        assert r.returncode == 0, r.stdout + r.stderr
        assert s.alive()
    finally:
        s.stop()


def test_spares_end_with_the_server():
    s = Server()
    deadline = time.time() + 30
    while not spares_of(s) and time.time() < deadline:
        time.sleep(0.05)
    spares = spares_of(s)
    assert spares
    s.stop()
    deadline = time.time() + 30
    while any(pid_alive(p) for p in spares) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(p) for p in spares)


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
