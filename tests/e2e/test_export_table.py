"""cuGetExportTable with a UUID rgpu does not know: refused with CUDA_ERROR_NOT_SUPPORTED, never a
crash, and one log line naming the UUID and what the server's driver knows of it."""
import sys
import textwrap

from conftest import BUILD, run_client

SCRIPT = textwrap.dedent("""
    import ctypes, os
    cu = ctypes.CDLL(os.environ["SHIM"])
    assert cu.cuInit(0) == 0
    table = ctypes.c_void_p(1)
    uuid = (ctypes.c_ubyte * 16)(*range(0xA0, 0xB0))
    for _ in range(3):
        print(cu.cuGetExportTable(ctypes.byref(table), uuid), table.value)
""")


def test_unknown_table_is_refused_and_named_once(server, tmp_path):
    script = tmp_path / "ask.py"
    script.write_text(SCRIPT)
    r = run_client([sys.executable, str(script)], server, env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split() == ["801", "None"] * 3, r.stdout
    lines = [l for l in r.stderr.splitlines() if "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf" in l]
    assert len(lines) == 1, r.stderr
    assert "is unknown to rgpu" in lines[0] and "server's driver" in lines[0], lines[0]
    assert server.alive()
