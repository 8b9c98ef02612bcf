"""Device printf (protocol/messages.h kOpDeviceOutput): what kernels print reaches the client's
stdout by the synchronize that follows, in order with the program's own output, and nothing of
it stays in the server's log."""
from conftest import BUILD, IMAGE, run_client

PROGRAM = str(BUILD / "bin/printf_test")


def test_kernel_printf_reaches_the_client_in_order(server):
    r = run_client([PROGRAM, IMAGE], server)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines == ["printf_test: before the kernel"] + ["rgpu_printf: 41"] * 3 + ["printf_test: after synchronize 1"] + [
        "rgpu_printf: 42"] * 3 + ["printf_test: after synchronize 2"], r.stdout
    assert "rgpu_printf" not in server.text()
