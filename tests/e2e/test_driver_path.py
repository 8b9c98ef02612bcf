"""The driver path end to end: a C program using the driver API, through the shim, over TCP, to
rgpu-server on the fake driver."""
from conftest import BUILD, IMAGE, run_client

PROGRAM = str(BUILD / "bin/driver_api_test")


def test_driver_api_program_passes_through_the_shim(server):
    r = run_client([PROGRAM, IMAGE], server)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all" in r.stdout and "checks passed" in r.stdout
    # Proof that the calls crossed the wire: the server served a session with many calls.
    log = server.text()
    assert "session for" in log and "started" in log


def test_every_call_waiting_gives_the_same_results(server):
    r = run_client([PROGRAM, IMAGE], server, env_extra={"RGPU_BATCH": "0"})
    assert r.returncode == 0, r.stdout + r.stderr


def test_trace_names_every_call(server, tmp_path):
    trace = tmp_path / "trace.txt"
    r = run_client([PROGRAM, IMAGE], server, env_extra={"RGPU_TRACE": str(trace)})
    assert r.returncode == 0, r.stdout + r.stderr
    text = trace.read_text()
    for name in ("cuInit", "cuMemAlloc_v2", "cuLaunchKernel", "cuStreamSynchronize", "cuModuleLoadData"):
        assert name in text, name


def test_unreachable_server_is_explained(tmp_path):
    from conftest import free_port
    # Connecting retries with backoff for RGPU_CONNECT_TIMEOUT (test_reconnect.py has the rest).
    r = run_client([PROGRAM, IMAGE], f"127.0.0.1:{free_port()}", env_extra={"RGPU_CONNECT_TIMEOUT": "1"})
    assert r.returncode != 0
    assert "cannot reach rgpu-server at 127.0.0.1:" in r.stderr
    assert "is the server running?" in r.stderr


def test_wrong_token_is_refused_with_a_message_that_says_so(token_server):
    r = run_client([PROGRAM, IMAGE], token_server, token="wrong")
    assert r.returncode != 0
    assert "token" in r.stderr, r.stderr


def test_missing_token_is_explained(token_server):
    r = run_client([PROGRAM, IMAGE], token_server)
    assert r.returncode != 0
    assert "requires a token; set RGPU_TOKEN" in r.stderr, r.stderr


def test_right_token_is_accepted(token_server):
    r = run_client([PROGRAM, IMAGE], token_server, token="correct horse battery staple")
    assert r.returncode == 0, r.stdout + r.stderr


def test_server_refuses_a_public_address_without_tls_and_a_token():
    import subprocess
    from conftest import free_port
    r = subprocess.run([str(BUILD / "bin/rgpu-server"), "--listen", f"0.0.0.0:{free_port()}", "--driver", "fake"],
                       capture_output=True, text=True, timeout=10, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 2
    assert "without TLS and a token" in r.stderr and "--insecure" in r.stderr, r.stderr


def test_server_refuses_its_own_shim_as_a_driver():
    import subprocess
    from conftest import free_port
    r = subprocess.run([str(BUILD / "bin/rgpu-server"), "--listen", f"127.0.0.1:{free_port()}", "--driver",
                        str(BUILD / "lib/libcuda.so.1")], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2
    assert "rgpu's own client shim" in r.stderr, r.stderr


def test_server_explains_a_missing_driver():
    import subprocess
    from conftest import free_port
    r = subprocess.run([str(BUILD / "bin/rgpu-server"), "--listen", f"127.0.0.1:{free_port()}", "--driver",
                        "/nonexistent/libcuda.so.1"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2
    assert "cannot load the CUDA driver" in r.stderr and "--driver" in r.stderr, r.stderr


def test_driver_calls_from_exit_handlers_after_main_work(server):
    # The static CUDA runtime tears down from a destructor that runs after the shim's own static
    # destructors would have; NVIDIA's samples crashed there before the shim's state was leaked.
    r = run_client([str(BUILD / "bin/exit_teardown_test"), IMAGE], server)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "teardown after main: ok" in r.stdout, r.stdout + r.stderr
    # The program accepts the real driver's CUDA_ERROR_DEINITIALIZED there; the shim serves every call.
    answers = [l for l in r.stdout.splitlines() if l.startswith("teardown: ")]
    assert len(answers) == 6 and all(l.endswith("-> 0") for l in answers), r.stdout
