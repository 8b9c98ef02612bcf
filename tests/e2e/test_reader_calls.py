"""Short synchronous calls that rgpu-server's reading thread runs itself (server/session.cpp,
run_on_reader) instead of handing them to the worker of their client thread: only where the
worker would have run them at once, so the program sees what it saw before. A query after one-way
work of its own thread, or of another thread, sees that work done; each client thread's calls see
its own current context, whichever server thread runs them. cuMemGetInfo is the query (the fake
counts allocations in it); frees are one-way, and each follows a kernel that keeps the context busy
(rgpu_spin), so a query that overtook a free would see its memory still in use."""
import re
import textwrap
import time

from conftest import BUILD, IMAGE, SHIM_PREAMBLE, Server, run_client

PREAMBLE = SHIM_PREAMBLE + textwrap.dedent(r"""
    CONTEXT_ERROR = 201  # CUDA_ERROR_INVALID_CONTEXT
    def free_bytes():
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        ok(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "MemGetInfo")
        return free.value
    img = open(sys.argv[1], "rb").read()
    mod, spin_fn = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuModuleLoadData(ctypes.byref(mod), img), "load")
    ok(cu.cuModuleGetFunction(ctypes.byref(spin_fn), mod, b"rgpu_spin"), "function")
    def busy_then_free(ms, nbytes):
        # Allocates, keeps the context busy for ms, and frees one-way (the fake's free waits for
        # the context's work): the free is queued or running on the server when this returns.
        p = ctypes.c_uint64()
        ok(cu.cuMemAlloc_v2(ctypes.byref(p), nbytes), "alloc")
        arg = ctypes.c_longlong(ms)
        params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
        ok(cu.cuLaunchKernel(spin_fn, 1, 1, 1, 1, 1, 1, 0, None, params, None), "launch")
        ok(cu.cuMemFree_v2(p), "free")
""")

ENV = {"RGPU_ALLOC_AHEAD": "0", "RGPU_ANSWER_CACHE": "none", "SHIM": str(BUILD / "lib/libcuda.so.1")}


def run_script(server, tmp_path, body):
    script = tmp_path / "script.py"
    script.write_text(PREAMBLE + textwrap.dedent(body))
    r = run_client(["python3", str(script), IMAGE], server, env_extra=ENV, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def calls_on_reader(server):
    """How many calls each ended session ran on its reading thread (its last log line), once the
    client's session has logged its end (within 10 s)."""
    deadline = time.time() + 10
    while "ended after" not in server.text() and time.time() < deadline:
        time.sleep(0.05)
    return [int(n) for n in re.findall(r"\((\d+) run on the reading thread", server.text())]


def test_a_query_sees_the_one_way_work_of_its_own_thread_done(tmp_path):
    server = Server()
    try:
        out = run_script(server, tmp_path, r"""
            base = free_bytes()
            wrong = 0
            for i in range(40):
                busy_then_free(2, 64 << 20)
                wrong += free_bytes() != base
            # Quiet queries too (the worker parked): these are the ones the reader runs.
            for i in range(200):
                wrong += free_bytes() != base
            print("wrong:", wrong)
        """)
        assert "wrong: 0" in out, out
    finally:
        server.stop()


def test_a_query_sees_the_one_way_work_of_another_thread_done(tmp_path):
    server = Server()
    try:
        out = run_script(server, tmp_path, r"""
            base = free_bytes()
            freed, asked = threading.Event(), threading.Event()
            wrong = []
            def querier():
                ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
                for i in range(20):
                    free_bytes()  # this thread's worker is idle, its context known
                    asked.set()
                    freed.wait()
                    freed.clear()
                    # The other thread's free returned before this call: it must be done.
                    got = free_bytes()
                    if got != base:
                        wrong.append(base - got)
            t = threading.Thread(target=querier)
            t.start()
            for i in range(20):
                asked.wait()
                asked.clear()
                busy_then_free(20, 64 << 20)
                freed.set()
            t.join()
            print("wrong:", wrong)
        """)
        assert "wrong: []" in out, out
    finally:
        server.stop()


def test_each_client_thread_keeps_its_own_context_when_the_reader_runs_its_calls(tmp_path):
    server = Server()
    try:
        out = run_script(server, tmp_path, r"""
            # The main thread has the primary context current; the other thread has none, so the
            # same query succeeds on one and fails on the other. Strictly alternating, many times;
            # then they swap.
            # Each query waits a millisecond first, the client's CPU idle: time for the worker of
            # the thread's previous call, if one ran it, to park (where it does not, a loaded
            # 2-core machine's scheduler can keep that worker behind the client's two threads
            # query after query, and it runs them all: the reader's path untested).
            results = {"main": [], "other": []}
            turn = [threading.Event(), threading.Event()]
            import time
            def query(who):
                time.sleep(0.001)
                free, total = ctypes.c_size_t(), ctypes.c_size_t()
                results[who].append(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)))
            def other():
                for phase in range(2):
                    if phase == 1:
                        ok(cu.cuCtxSetCurrent(ctx), "SetCurrent")
                    for i in range(100):
                        turn[1].wait()
                        turn[1].clear()
                        query("other")
                        turn[0].set()
            t = threading.Thread(target=other)
            t.start()
            for phase in range(2):
                if phase == 1:
                    ok(cu.cuCtxSetCurrent(None), "SetCurrent(NULL)")
                for i in range(100):
                    query("main")
                    turn[1].set()
                    turn[0].wait()
                    turn[0].clear()
            t.join()
            print("main:", sorted(set(results["main"][:100])), sorted(set(results["main"][100:])))
            print("other:", sorted(set(results["other"][:100])), sorted(set(results["other"][100:])))
        """)
        assert "main: [0] [201]" in out, out
        assert "other: [201] [0]" in out, out
        # The queries above are the calls this test is about: most of them ran on the reading thread.
        assert any(n >= 200 for n in calls_on_reader(server)), server.text()
    finally:
        server.stop()


def test_with_inline_calls_off_every_call_goes_to_its_worker(tmp_path):
    server = Server(env={"RGPU_INLINE_CALLS": "0"})
    try:
        out = run_script(server, tmp_path, r"""
            base = free_bytes()
            print("wrong:", sum(free_bytes() != base for i in range(50)))
        """)
        assert "wrong: 0" in out, out
        assert calls_on_reader(server) and not any(calls_on_reader(server)), server.text()
    finally:
        server.stop()
