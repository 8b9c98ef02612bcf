"""The throwaway sshd of the tests that go through a real SSH tunnel (test_run.py,
test_quick_start.py import the fixture from here; this is not a conftest, so the other tests of
this folder see none of it).

The `sshd` fixture starts scripts/start_test_sshd.sh once per importing module (it installs
Debian's openssh-server if missing) and yields its folder: port, user_key, known_hosts. It skips,
saying why, when no ssh client is on PATH or sshd cannot be started. sshd listens on 127.0.0.1
only and is stopped when the module's tests are done."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
START_SSHD = REPO / "scripts" / "start_test_sshd.sh"
# Installing openssh-server on a fresh machine takes a while; starting sshd takes well under 1 s.
SSHD_START_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """Starts scripts/start_test_sshd.sh; yields its folder (port, user_key, known_hosts)."""
    if shutil.which("ssh") is None:
        pytest.skip("no ssh client on PATH (apt-get install openssh-client)")
    folder = tmp_path_factory.mktemp("sshd")
    log_path = folder / "sshd.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["bash", str(START_SSHD), str(folder)], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + SSHD_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.skip(f"sshd could not be started (scripts/start_test_sshd.sh exited "
                            f"{proc.returncode}): {log_path.read_text()[-800:]}")
            if time.monotonic() > deadline:
                pytest.skip(f"sshd did not listen within {SSHD_START_TIMEOUT_S} s: "
                            f"{log_path.read_text()[-800:]}")
            port_file = folder / "port"
            if port_file.exists() and port_file.read_text().strip():
                try:
                    socket.create_connection(("127.0.0.1", int(port_file.read_text())),
                                             1).close()
                    break
                except OSError:
                    pass
            time.sleep(0.05)
        yield folder
    finally:
        proc.terminate()  # the script exec'd sshd -D, so this is sshd itself
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
