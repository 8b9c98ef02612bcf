"""rgpu-doctor against rgpu-server on the fake driver: all ok on a good setup; a wrong token, no
server, and a library path without the shim (or with another libcuda.so.1 first) each give the
right problem and exit 1."""
import os
import shutil
import stat
import subprocess
from pathlib import Path

from conftest import BUILD, free_port, run_client

DOCTOR = str(BUILD / "bin/rgpu-doctor")


def fake_python(tmp_path, cuda):
    """A `python` that answers the doctor's torch question as a torch built for `cuda` would."""
    p = tmp_path / f"python-{cuda}"
    p.write_text(f"#!/bin/sh\necho 2.9.0\necho {cuda}\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def doctor(server, tmp_path, token=None, env=None, cuda="12.8"):
    return run_client([DOCTOR, "--python", fake_python(tmp_path, cuda)], server, token=token, env_extra=env, timeout=60)


def lines(r, kind):
    return [line for line in r.stdout.splitlines() if line.startswith(kind + ":")]


def test_all_ok(token_server, tmp_path):
    r = doctor(token_server, tmp_path, token="correct horse battery staple")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not lines(r, "problem"), r.stdout
    out = r.stdout
    assert "ok: libcuda.so.1 resolves to rgpu's shim" in out
    assert f"ok: rgpu-server at {token_server.addr} accepts connections" in out
    assert "ok: the token (RGPU_TOKEN) is accepted, plain TCP" in out
    version = (Path(__file__).resolve().parents[2] / "VERSION").read_text().strip()
    assert f"ok: versions: rgpu {version} here, protocol" in out
    assert "ok: GPU 0: NVIDIA H200 (rgpu fake)" in out and "driver CUDA 13.0" in out
    assert "ok: round trip" in out and "ok: bandwidth:" in out
    assert "ok: torch 2.9.0 is built for CUDA 12.8, which the server's driver (CUDA 13.0) runs" in out
    assert all(line.startswith(("ok: ", "problem: ")) for line in out.splitlines()), out


def test_torch_newer_than_the_driver(server, tmp_path):
    r = doctor(server, tmp_path, cuda="13.2")
    assert r.returncode == 1
    [p] = lines(r, "problem")
    assert "built for CUDA 13.2, newer than the server's driver (CUDA 13.0)" in p and "fix: install a torch" in p


def test_wrong_token(token_server, tmp_path):
    r = doctor(token_server, tmp_path, token="not the token")
    assert r.returncode == 1, r.stdout
    [p] = lines(r, "problem")
    assert "handshake" in p and "token" in p and "fix: set RGPU_TOKEN" in p, p
    assert "ok: libcuda.so.1 resolves to rgpu's shim" in r.stdout


def test_no_server(tmp_path):
    r = doctor(f"127.0.0.1:{free_port()}", tmp_path)
    assert r.returncode == 1
    [p] = lines(r, "problem")
    assert "nothing answers at 127.0.0.1:" in p and "fix: start rgpu-server there" in p, p


def test_library_path_without_the_shim(server, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = doctor(server, tmp_path, env={"LD_LIBRARY_PATH": str(empty)})
    assert r.returncode == 1
    p = lines(r, "problem")[0]
    assert "no libcuda.so.1 is found" in p and "fix: put rgpu's lib folder first: export LD_LIBRARY_PATH=" in p, p
    # Another driver first on the path (the fake driver stands in for NVIDIA's).
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(BUILD / "lib/libfakecuda.so", other / "libcuda.so.1")
    r = doctor(server, tmp_path, env={"LD_LIBRARY_PATH": f"{other}:{BUILD / 'lib'}"})
    assert r.returncode == 1
    p = lines(r, "problem")[0]
    assert f"libcuda.so.1 resolves to {other}/libcuda.so.1, which is not rgpu's shim" in p, p
