"""Runs the quick-start commands of the README and the docs as a user types them (ctest
docs_quick_start).

README.md, docs/quickstart.md and docs/training.md mark each command block the test runs with an
HTML comment right before it, which the rendered page does not show:

    <!-- quick-start GROUP: run [expect="TEXT"] -->      a client block: must exit 0 (and print TEXT)
    <!-- quick-start GROUP: server -->                    a GPU host block, left running
    <!-- quick-start GROUP: file NAME -->                 the next fenced block is saved as NAME

The blocks run in page order, one set of pages at a time (PAGE_SETS: the README's quick start
stands alone, the docs' training page goes on from their quick start), each set in a temporary
folder of its own that stands for the checkout (its build/, python/, examples/ and docs/ are the
tree's), with HOME in it too. The client's run blocks are
one shell session: what one block exports the next sees. A server block runs in its own shell,
as in another terminal on the GPU host, and stays up until the test ends; the test waits for its
"listening on" line. Group "shim" needs the build; the other groups need torch, and are skipped
(saying so) where the python running the test has none.

What differs from the user's machine, and only this (rewrite()):
- `gpuhost` and `0.0.0.0` are 127.0.0.1, and the ports 9713 and 9720 are free ones;
- `rgpu-server` gets `--driver fake` and `rgpu-opserver` `--device cpu` (no GPU here);
- `sha256:<...>` is the fingerprint that the last server started printed;
- the install lines in INSTALLS are taken as done: the build under test is the install, with
  `rgpu-opserver`, `rgpu-run` and `python` on PATH as `pip install ./python` puts them there
  (ctest rgpu_quick_start runs the real `pip install ./python`). A block with any other install
  line fails the test until the line is added here.

    python -m pytest -q tests/docs/test_quick_start_docs.py     (RGPU_BUILD_DIR: the build, default build/)
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("RGPU_BUILD_DIR", REPO / "build")).resolve()
PAGE_SETS = (("README.md",), ("docs/quickstart.md", "docs/training.md"))
# Lines a user runs to install or build, which the build under test stands for.
INSTALLS = {
    "scripts/setup.sh",
    "RGPU_SETUP_TORCH=1 scripts/setup.sh",
    "pip install ./python",
    "pip install torch --index-url https://download.pytorch.org/whl/cpu",
}
TORCH_FREE_GROUPS = {"shim"}
MARKER = re.compile(r"<!-- quick-start (\w+): (run|server|file)\s*([^>]*?)\s*-->\n```(\w*)\n(.*?)\n```", re.S)
SERVER_START_S = 60
RUN_TIMEOUT_S = 300


@dataclass
class Block:
    page: str
    group: str
    kind: str  # run, server or file
    arg: str  # run: expect="..."; file: the name
    text: str

    def expect(self) -> str | None:
        m = re.fullmatch(r'expect="([^"]*)"', self.arg)
        return m.group(1) if m else None


def blocks(pages: tuple[str, ...]) -> list[Block]:
    found = []
    for page in pages:
        for m in MARKER.finditer((REPO / page).read_text(encoding="utf-8")):
            found.append(Block(page, m.group(1), m.group(2), m.group(3), m.group(5)))
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def have_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return (BUILD / "bin" / "rgpu-opserver").exists() and (BUILD / "lib" / "librgpu_torch.so").exists()


class Session:
    """The folder, the client's shell state and the servers of one run through the pages."""

    def __init__(self, root: Path):
        self.root = root
        self.ports = {"9713": str(free_port()), "9720": str(free_port())}
        self.fingerprint = ""
        self.servers: list[tuple[subprocess.Popen, Path]] = []
        for name, target in (("build", BUILD), ("python", REPO / "python"), ("examples", REPO / "examples"),
                             ("docs", REPO / "docs")):
            (root / name).symlink_to(target)
        # What `pip install ./python` puts on PATH, pointing into the tree and build under test.
        bin_dir = root / ".bin"
        bin_dir.mkdir()
        for name, command in (("python", f"exec {shlex.quote(sys.executable)} \"$@\""),
                              ("rgpu-run", f"exec {shlex.quote(sys.executable)} -m rgpu.run \"$@\""),
                              ("rgpu-opserver", f"exec {shlex.quote(str(BUILD / 'bin' / 'rgpu-opserver'))} \"$@\"")):
            (bin_dir / name).write_text(f"#!/bin/sh\n{command}\n")
            (bin_dir / name).chmod(0o755)
        home = root / "home"
        home.mkdir()
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("RGPU_", "XDG_", "PYTHON")) and k not in ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")}
        self.env.update(HOME=str(home), PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                        PYTHONPATH=str(REPO / "python"), RGPU_BUILD_DIR=str(BUILD),
                        # Keep the run's caches in the folder, and the torch threads few (2 shared cores).
                        XDG_CACHE_HOME=str(root / "cache"), OMP_NUM_THREADS="1",
                        RGPU_CONNECT_TIMEOUT="20")
        self.exports = root / ".client-env"
        self.exports.write_text("")

    def rewrite(self, text: str) -> str:
        lines = []
        for line in text.splitlines():
            command = line.split("#", 1)[0].strip()
            if any(command.startswith(tool) for tool in ("scripts/", "pip ", "RGPU_SETUP_TORCH=")):
                assert command in INSTALLS, (
                    f"the docs' quick start runs {command!r}, which this test does not know how to stand in for; "
                    "add it to INSTALLS in tests/docs/test_quick_start_docs.py if the build under test is that install")
                lines.append(f": {line}")
                continue
            line = line.replace("gpuhost", "127.0.0.1").replace("0.0.0.0", "127.0.0.1")
            for port, free in self.ports.items():
                line = re.sub(rf":{port}\b", f":{free}", line)
            if re.search(r"sha256:<[^>]*>", line):
                assert self.fingerprint, "a block uses the server's fingerprint before any server printed one"
                line = re.sub(r"sha256:<[^>]*>", self.fingerprint, line)
            if re.match(r"\s*build/bin/rgpu-server\b", line) and "--driver" not in line:
                line = re.sub(r"(build/bin/rgpu-server)", r"\1 --driver fake", line, count=1)
            line = re.sub(r"(rgpu-opserver\b.*)--device cuda", r"\1--device cpu", line)
            if re.match(r"\s*(build/bin/)?rgpu-opserver\b", line) and "--device" not in line:
                line = re.sub(r"(rgpu-opserver)", r"\1 --device cpu", line, count=1)
            lines.append(line)
        return "\n".join(lines) + "\n"

    def start_server(self, block: Block):
        log = self.root / f"server-{len(self.servers)}.log"
        out = log.open("w")
        script = self.rewrite(block.text)
        proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=self.root, env=self.env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.servers.append((proc, log))
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if "listening on" in text:
                m = re.search(r"fingerprint (sha256:[0-9a-f]{64})", text)
                if m:
                    self.fingerprint = m.group(1)
                return
            if proc.poll() is not None:
                pytest.fail(f"{block.page}: the server block\n{script}ended ({proc.returncode}) before listening:\n{text}")
            time.sleep(0.1)
        pytest.fail(f"{block.page}: the server block\n{script}did not print 'listening on' in {SERVER_START_S} s:\n"
                    f"{log.read_text(errors='replace')}")

    def run(self, block: Block):
        script = self.rewrite(block.text)
        # The client's shell session: earlier blocks' exports in, this block's out.
        wrapped = (f"source {shlex.quote(str(self.exports))}\nset -euo pipefail\n{script}"
                   f"export -p > {shlex.quote(str(self.exports))}\n")
        started = time.monotonic()
        r = subprocess.run(["bash", "-c", wrapped], cwd=self.root, env=self.env, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT_S)
        took = time.monotonic() - started
        print(f"--- {block.page} [{block.group}] ({took:.1f} s)\n{script}{r.stdout[-2000:]}")
        servers = "\n".join(f"--- {log.name}:\n{log.read_text(errors='replace')[-3000:]}" for _, log in self.servers)
        assert r.returncode == 0, (f"{block.page}: the block\n{script}exited {r.returncode}:\n{r.stdout[-3000:]}\n"
                                   f"{r.stderr[-3000:]}\n{servers}")
        if block.expect() is not None:
            assert block.expect() in r.stdout, (f"{block.page}: the block\n{script}did not print "
                                                f"{block.expect()!r}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")

    def stop(self):
        for proc, _ in self.servers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in self.servers:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.mark.parametrize("pages", PAGE_SETS, ids=lambda pages: pages[0])
def test_the_quick_starts_mark_both_paths(pages):
    found = blocks(pages)
    groups = {b.group for b in found}
    assert {"shim", "device"} <= groups, f"marked groups in {pages}: {sorted(groups)}"
    for group in ("shim", "device"):
        assert any(b.kind == "server" for b in found if b.group == group), f"{pages}: no {group} server block"
        assert any(b.expect() for b in found if b.group == group), f"{pages}: no {group} block checks its output"
    device_runs = " ".join(b.text for b in found if b.group == "device" and b.kind == "run")
    assert "rgpu-run --opserver" in device_runs, f"{pages}: the PyTorch device's quick start names rgpu-run --opserver"


@pytest.mark.parametrize("pages", PAGE_SETS, ids=lambda pages: pages[0])
def test_the_quick_start_commands_run_as_written(pages, tmp_path):
    for needed in ("bin/rgpu-server", "lib/libcuda.so.1", "bin/vector_add", "tests/kernels/test_kernels.fatbin"):
        assert (BUILD / needed).exists(), f"{BUILD / needed} is missing: build rgpu first (scripts/setup.sh)"
    torch_ok = have_torch()
    session = Session(tmp_path)
    skipped = set()
    try:
        for block in blocks(pages):
            if block.group not in TORCH_FREE_GROUPS and not torch_ok:
                skipped.add(block.group)
                continue
            if block.kind == "file":
                (tmp_path / block.arg).write_text(block.text + "\n")
            elif block.kind == "server":
                session.start_server(block)
            else:
                session.run(block)
    finally:
        session.stop()
    if skipped:
        pytest.skip(f"the shim's quick start passed; {', '.join(sorted(skipped))} skipped: they need torch in "
                    f"{sys.executable} and rgpu-opserver in {BUILD} (a build with -DRGPU_TORCH_PYTHON)")
