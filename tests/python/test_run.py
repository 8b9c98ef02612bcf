"""Tests of rgpu-run (python/rgpu/run.py): the environment it gives the command, exit statuses,
signals, and the SSH tunnel against a throwaway sshd on loopback.

The tunnel tests start scripts/start_test_sshd.sh once for the module (sshd_fixture.py; it
installs Debian's openssh-server if missing) and a small TCP echo server standing in for
rgpu-opserver; they skip, saying why, when sshd cannot be started. Everything stays on
127.0.0.1 and stops by itself. rgpu-run runs as a separate process (`python3
python/rgpu/run.py`), as a user would run it; it needs neither torch nor the rest of the rgpu
package.

    python3 -m pytest -q tests/python/test_run.py
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from sshd_fixture import sshd  # noqa: F401  (the fixture)

REPO = Path(__file__).resolve().parents[2]
RUN = [sys.executable, str(REPO / "python" / "rgpu" / "run.py")]


def rgpu_run(*args, env=None, timeout=30) -> subprocess.CompletedProcess:
    return subprocess.run([*RUN, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def start_rgpu_run(*args) -> subprocess.Popen:
    """rgpu-run in a session of its own: no controlling terminal, so it passes every signal on
    (with a terminal it leaves Ctrl-C to the terminal) and the test's own signals stay apart."""
    return subprocess.Popen([*RUN, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def python_command(body: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(body)]


def free_port() -> int:
    """A loopback port that nothing listens on (for a moment, which is enough here)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Prints "ready" once its SIGTERM/SIGINT handlers are in place, then waits to be signalled and
# reports which signal came, exiting 7.
SIGNAL_REPORTER = python_command("""
    import signal, sys, time
    def report(signum, frame):
        print("got", signal.Signals(signum).name, flush=True)
        sys.exit(7)
    signal.signal(signal.SIGTERM, report)
    signal.signal(signal.SIGINT, report)
    print("ready", flush=True)
    time.sleep(20)
    print("not signalled", flush=True)
""")


def wait_for_line(proc: subprocess.Popen, expected: str, timeout=15.0):
    """Reads proc's stdout until a line equal to expected; fails with its stderr otherwise."""
    result = []

    def read():
        for line in proc.stdout:
            if line.strip() == expected:
                result.append(line)
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if not result:
        proc.kill()
        pytest.fail(f"no {expected!r} from the command within {timeout} s; rgpu-run's stderr:\n"
                    f"{proc.stderr.read()}")


# --------------------------------------------------------------------------------------------
# Without a tunnel: --server / --opserver


class TestDirectAddresses:
    def test_opserver_address_reaches_the_command_and_its_exit_status_comes_back(self):
        r = rgpu_run("--opserver", "gpu-box:9720", "--",
                     *python_command("""
                         import os, sys
                         print(os.environ["RGPU_OPSERVER"])
                         sys.exit(3)
                     """))
        assert r.stdout.strip() == "gpu-box:9720", r.stderr
        assert r.returncode == 3

    def test_server_address_is_set_and_the_other_variable_is_left_alone(self):
        env = dict(os.environ, RGPU_OPSERVER="left:1")
        env.pop("RGPU_SERVER", None)
        r = rgpu_run("--server", "[::1]:9713", "--",
                     *python_command("""
                         import os
                         print(os.environ["RGPU_SERVER"], os.environ["RGPU_OPSERVER"])
                     """), env=env)
        assert (r.returncode, r.stdout.strip()) == (0, "[::1]:9713 left:1"), r.stderr

    def test_a_tls_address_is_passed_on_as_given(self):
        r = rgpu_run("--server", "tls://gpu-box:9713", "--",
                     *python_command("""
                         import os
                         print(os.environ["RGPU_SERVER"])
                     """))
        assert (r.returncode, r.stdout.strip()) == (0, "tls://gpu-box:9713"), r.stderr

    def test_command_killed_by_a_signal_exits_128_plus_the_signal(self):
        r = rgpu_run("--opserver", "h:1", "--",
                     *python_command("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
        assert r.returncode == 128 + signal.SIGKILL

    @pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
    def test_signal_sent_to_rgpu_run_is_passed_on_to_the_command(self, signum):
        proc = start_rgpu_run("--opserver", "h:1", "--", *SIGNAL_REPORTER)
        wait_for_line(proc, "ready")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=15)
        assert out.strip() == f"got {signum.name}", err
        assert proc.returncode == 7

    def test_command_ended_by_a_forwarded_sigterm_exits_143(self):
        proc = start_rgpu_run("--opserver", "h:1", "--",
                              *python_command("import time; print('ready', flush=True); "
                                              "time.sleep(20)"))
        wait_for_line(proc, "ready")
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)
        assert proc.returncode == 128 + signal.SIGTERM

    def test_options_after_the_double_dash_belong_to_the_command(self):
        r = rgpu_run("--opserver", "h:1", "--",
                     *python_command("import sys; print(sys.argv[1:])"), "--host", "-v")
        assert r.stdout.strip() == "['--host', '-v']", r.stderr

    def test_missing_command_is_a_usage_error(self):
        r = rgpu_run("--opserver", "h:1")
        assert r.returncode == 2
        assert "no command to run" in r.stderr

    def test_missing_destination_is_a_usage_error(self):
        r = rgpu_run("--", "true")
        assert r.returncode == 2
        assert "--host" in r.stderr and "--server" in r.stderr

    def test_malformed_address_is_a_usage_error(self):
        r = rgpu_run("--server", "gpu-box", "--", "true")
        assert r.returncode == 2
        assert "HOST:PORT" in r.stderr

    def test_unknown_command_exits_127_and_says_so(self):
        r = rgpu_run("--opserver", "h:1", "--", "rgpu-no-such-command")
        assert r.returncode == 127
        assert "cannot run 'rgpu-no-such-command'" in r.stderr

    def test_shim_dir_goes_first_in_ld_library_path(self, tmp_path):
        (tmp_path / "libcuda.so.1").write_bytes(b"")
        env = dict(os.environ, LD_LIBRARY_PATH="/old")
        r = rgpu_run("--server", "h:1", "--shim-dir", str(tmp_path), "--",
                     *python_command("import os; print(os.environ['LD_LIBRARY_PATH'])"),
                     env=env)
        assert r.stdout.strip() == f"{tmp_path}:/old", r.stderr

    def test_shim_dir_nccl_is_preloaded_before_the_users_preload(self, tmp_path):
        for name in ("libcuda.so.1", "libnccl.so.2"):
            (tmp_path / name).write_bytes(b"")
        show = python_command("import os; print(os.environ.get('LD_PRELOAD', 'unset'))")
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        r = rgpu_run("--server", "h:1", "--shim-dir", str(tmp_path), "--", *show, env=env)
        assert r.stdout.strip() == f"{tmp_path}/libnccl.so.2", r.stderr
        # The user's own preload stays, after rgpu's. (The loader says on stderr that it cannot
        # load the empty stand-ins and goes on without them.)
        env["LD_PRELOAD"] = "/users/own.so"
        r = rgpu_run("--server", "h:1", "--shim-dir", str(tmp_path), "--", *show, env=env)
        assert r.stdout.strip() == f"{tmp_path}/libnccl.so.2:/users/own.so", r.stderr

    def test_no_nccl_preload_without_the_library_or_with_no_nccl(self, tmp_path):
        (tmp_path / "libcuda.so.1").write_bytes(b"")
        show = python_command("import os; print(os.environ.get('LD_PRELOAD', 'unset'))")
        env = dict(os.environ, LD_PRELOAD="/users/own.so")
        r = rgpu_run("--server", "h:1", "--shim-dir", str(tmp_path), "--", *show, env=env)
        assert r.stdout.strip() == "/users/own.so", r.stderr
        env.pop("LD_PRELOAD")
        r = rgpu_run("--server", "h:1", "--shim-dir", str(tmp_path), "--", *show, env=env)
        assert r.stdout.strip() == "unset", r.stderr
        (tmp_path / "libnccl.so.2").write_bytes(b"")
        r = rgpu_run("--server", "h:1", "--shim-dir", str(tmp_path), "--no-nccl", "--", *show, env=env)
        assert r.stdout.strip() == "unset", r.stderr

    def test_without_shim_nothing_is_preloaded(self, tmp_path):
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        r = rgpu_run("--server", "h:1", "--", *python_command(
            "import os; print(os.environ.get('LD_PRELOAD', 'unset'))"), env=env)
        assert r.stdout.strip() == "unset", r.stderr

    def test_progress_options_set_rgpu_progress(self):
        show = python_command("import os; print(os.environ.get('RGPU_PROGRESS', 'unset'))")
        env = dict(os.environ)
        env.pop("RGPU_PROGRESS", None)
        for flag, want in (("--progress", "1"), ("--no-progress", "0")):
            r = rgpu_run("--server", "h:1", flag, "--", *show, env=env)
            assert (r.returncode, r.stdout.strip()) == (0, want), r.stderr
        r = rgpu_run("--server", "h:1", "--", *show, env=env)
        assert r.stdout.strip() == "unset", r.stderr

    def test_shim_dir_without_the_library_is_refused(self, tmp_path):
        r = rgpu_run("--server", "h:1", "--shim-dir", str(tmp_path), "--", "true")
        assert r.returncode == 2
        assert "no libcuda.so.1" in r.stderr and "--shim-dir" in r.stderr

    def test_help_describes_every_option(self):
        r = rgpu_run("--help")
        assert r.returncode == 0
        for word in ("--host", "--ssh-port", "-i KEY", "--ssh-option", "--server-port",
                     "--opserver-port", "--server HOST:PORT", "--opserver HOST:PORT", "--shim",
                     "--driver-path", "--shim-dir", "--timeout", "--no-check", "RGPU_SERVER",
                     "RGPU_OPSERVER", "LD_LIBRARY_PATH", "LD_PRELOAD", "--no-nccl", "128+N", "--progress",
                     "RGPU_PROGRESS"):
            assert word in r.stdout, f"--help does not mention {word}"

    def test_runs_as_python_dash_m_rgpu_run(self):
        env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
        r = subprocess.run([sys.executable, "-m", "rgpu.run", "--opserver", "h:9",
                            "--", sys.executable, "-c",
                            "import os; print(os.environ['RGPU_OPSERVER'])"],
                           capture_output=True, text=True, env=env, timeout=60)
        assert (r.returncode, r.stdout.strip()) == (0, "h:9"), (
            f"python -m rgpu.run failed; if the rgpu package's __init__ needs torch, "
            f"rgpu-run cannot start without it:\n{r.stderr}")

    def test_module_imports_neither_torch_nor_the_rgpu_package(self):
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import run; "
                "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('rgpu')))")
        r = subprocess.run([sys.executable, "-c", code, str(REPO / "python" / "rgpu")],
                           capture_output=True, text=True, timeout=30)
        assert (r.returncode, r.stdout.strip()) == (0, "[]"), r.stderr

    def test_missing_ssh_client_is_explained(self, tmp_path):
        env = dict(os.environ, PATH=str(tmp_path))  # an empty folder: no ssh on PATH
        r = rgpu_run("--host", "me@gpu-box", "--", sys.executable, "-c", "pass", env=env)
        assert r.returncode == 125
        assert "needs the OpenSSH client `ssh`" in r.stderr
        assert "apt-get install openssh-client" in r.stderr


# --------------------------------------------------------------------------------------------
# Through a real SSH tunnel to a throwaway sshd on loopback


@pytest.fixture(scope="module")
def echo_port():
    """A TCP echo server on loopback standing in for rgpu-opserver; yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def echo(conn):
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def serve():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.settimeout(20)
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    yield listener.getsockname()[1]
    stop.set()
    server.join(2)
    listener.close()


def ssh_args(sshd: Path, key: Path | None = None) -> list[str]:
    """rgpu-run's SSH options for the test sshd: this user, its key, its host key only."""
    return ["--host", f"{getpass.getuser()}@127.0.0.1",
            "--ssh-port", (sshd / "port").read_text().strip(),
            "-i", str(key or sshd / "user_key"),
            "-o", f"UserKnownHostsFile={sshd / 'known_hosts'}",
            "-o", "IdentitiesOnly=yes", "--timeout", "15"]


def ssh_pids_using(key: Path) -> list[int]:
    """ssh client processes whose command line names this key file (rgpu-run's tunnels)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"ssh" and str(key).encode() in argv:
            pids.append(int(entry.name))
    return pids


ECHO_THROUGH_OPSERVER = python_command("""
    import os, socket, sys
    host, port = os.environ["RGPU_OPSERVER"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), 5) as c:
        c.sendall(b"ping through rgpu-run")
        print(host, port, c.recv(100).decode())
    sys.exit(3)
""")


class TestSshTunnel:
    def test_command_reaches_the_far_port_through_the_tunnel(self, sshd, echo_port):
        r = rgpu_run(*ssh_args(sshd), "--opserver-port", str(echo_port),
                     "--server-port", str(free_port()), "--", *ECHO_THROUGH_OPSERVER)
        assert r.returncode == 3, r.stderr
        host, port, reply = r.stdout.strip().split(" ", 2)
        assert (host, reply) == ("127.0.0.1", "ping through rgpu-run")
        assert int(port) != echo_port  # a local forward, not the far port itself
        # Only one of the two services answers, and not the driver path's: not a failure, and
        # not news to a PyTorch-device user (said with --verbose only; the test below).
        assert "rgpu-server" not in r.stderr, r.stderr
        assert ssh_pids_using(sshd / "user_key") == []

    def test_both_variables_point_at_forwards(self, sshd, echo_port):
        r = rgpu_run(*ssh_args(sshd), "--opserver-port", str(echo_port),
                     "--server-port", str(echo_port), "--",
                     *python_command("import os; print(os.environ['RGPU_SERVER'], "
                                     "os.environ['RGPU_OPSERVER'])"))
        assert r.returncode == 0, r.stderr
        server, opserver = r.stdout.split()
        assert server.startswith("127.0.0.1:") and opserver.startswith("127.0.0.1:")
        assert server != opserver
        assert r.stderr == ""

    def test_sigterm_ends_the_command_then_the_tunnel(self, sshd, echo_port):
        proc = start_rgpu_run(*ssh_args(sshd), "--opserver-port", str(echo_port),
                              "--server-port", str(echo_port), "--", *SIGNAL_REPORTER)
        wait_for_line(proc, "ready")
        assert len(ssh_pids_using(sshd / "user_key")) == 1
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
        assert out.strip() == "got SIGTERM", err
        assert proc.returncode == 7
        assert ssh_pids_using(sshd / "user_key") == []

    def test_tunnel_lost_while_the_command_runs_is_reported(self, sshd, echo_port, tmp_path):
        go_on = tmp_path / "go_on"
        proc = start_rgpu_run(*ssh_args(sshd), "--opserver-port", str(echo_port),
                              "--server-port", str(echo_port), "--",
                              *python_command(f"""
                                  import os, time
                                  print("ready", flush=True)
                                  deadline = time.monotonic() + 30
                                  while not os.path.exists({str(go_on)!r}):
                                      assert time.monotonic() < deadline
                                      time.sleep(0.02)
                              """))
        wait_for_line(proc, "ready")
        # rgpu-run's stderr, read as it comes: the command goes on once rgpu-run has said it.
        lines, said = [], threading.Event()
        def read_stderr():
            for line in proc.stderr:
                lines.append(line)
                if "the SSH tunnel closed while the command runs" in line:
                    said.set()
        reader = threading.Thread(target=read_stderr)
        reader.start()
        (ssh_pid,) = ssh_pids_using(sshd / "user_key")
        os.kill(ssh_pid, signal.SIGTERM)
        said.wait(20)
        go_on.write_text("")
        proc.wait(30)
        reader.join(10)
        err = "".join(lines)
        assert proc.returncode == 0, err
        assert "the SSH tunnel closed while the command runs" in err

    def test_wrong_key_is_an_auth_failure_with_what_to_try(self, sshd, tmp_path):
        wrong = tmp_path / "wrong_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)],
                       check=True)
        r = rgpu_run(*ssh_args(sshd, key=wrong), "--", "true")
        assert r.returncode == 125
        assert "ssh could not log in" in r.stderr
        assert "Permission denied" in r.stderr  # ssh's own last line
        assert "authorized_keys" in r.stderr
        assert ssh_pids_using(wrong) == []

    def test_nothing_listening_on_the_far_ports_says_what_to_start(self, sshd):
        server_port, opserver_port = free_port(), free_port()
        r = rgpu_run(*ssh_args(sshd), "--server-port", str(server_port),
                     "--opserver-port", str(opserver_port), "--", "true")
        assert r.returncode == 125
        assert (f"nothing listens on 127.0.0.1:{opserver_port} (connect failed: Connection "
                f"refused); start rgpu-opserver there") in r.stderr
        assert f"nothing listens on 127.0.0.1:{server_port}" in r.stderr
        assert ssh_pids_using(sshd / "user_key") == []

    def test_missing_rgpu_server_is_no_news_to_a_pytorch_device_user(self, sshd, echo_port):
        server_port = free_port()
        args = [*ssh_args(sshd), "--server-port", str(server_port), "--opserver-port", str(echo_port)]
        r = rgpu_run(*args, "--", "true")
        assert r.returncode == 0, r.stderr
        assert "nothing listens" not in r.stderr, r.stderr
        r = rgpu_run("-v", *args, "--", "true")  # still told with --verbose
        assert r.returncode == 0, r.stderr
        assert f"nothing listens on 127.0.0.1:{server_port}" in r.stderr and "rgpu-server" in r.stderr

    def test_missing_rgpu_opserver_is_said_but_the_command_runs(self, sshd, echo_port):
        opserver_port = free_port()
        r = rgpu_run(*ssh_args(sshd), "--server-port", str(echo_port), "--opserver-port", str(opserver_port),
                     "--", "true")
        assert r.returncode == 0, r.stderr
        assert f"note: nothing listens on 127.0.0.1:{opserver_port}" in r.stderr

    def test_driver_path_needs_rgpu_server(self, sshd, echo_port, tmp_path):
        (tmp_path / "libcuda.so.1").write_bytes(b"")
        r = rgpu_run(*ssh_args(sshd), "--shim-dir", str(tmp_path),
                     "--opserver-port", str(echo_port), "--server-port", str(free_port()),
                     "--", "true")
        assert r.returncode == 125
        assert "start rgpu-server there" in r.stderr

    def test_unknown_host_key_is_explained(self, sshd):
        args = ssh_args(sshd)
        args[args.index(f"UserKnownHostsFile={sshd / 'known_hosts'}")] = \
            "UserKnownHostsFile=/dev/null"
        r = rgpu_run(*args, "--", "true")
        assert r.returncode == 125
        assert "host key" in r.stderr and "Connect once by hand" in r.stderr

    def test_no_ssh_server_on_the_port_is_explained(self, sshd):
        args = ssh_args(sshd)
        args[args.index("--ssh-port") + 1] = str(free_port())
        r = rgpu_run(*args, "--", "true")
        assert r.returncode == 125
        assert "nothing accepts SSH connections" in r.stderr
        assert "--ssh-port" in r.stderr

    def test_tunnel_goes_when_rgpu_run_is_killed_outright(self, sshd, echo_port):
        proc = start_rgpu_run(*ssh_args(sshd), "--opserver-port", str(echo_port),
                              "--server-port", str(echo_port), "--", *SIGNAL_REPORTER)
        wait_for_line(proc, "ready")
        assert len(ssh_pids_using(sshd / "user_key")) == 1
        os.killpg(proc.pid, signal.SIGKILL)  # rgpu-run and the command; ssh has its own session
        proc.communicate(timeout=15)
        deadline = time.monotonic() + 5
        while ssh_pids_using(sshd / "user_key") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ssh_pids_using(sshd / "user_key") == []


@pytest.fixture
def silent_port():
    """A loopback port that accepts TCP connections and never says anything: an SSH server
    that does not answer."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


class TestSlowSshServer:
    @pytest.fixture(autouse=True)
    def need_ssh(self):
        if shutil.which("ssh") is None:
            pytest.skip("no ssh client on PATH (apt-get install openssh-client)")

    def test_tunnel_that_does_not_come_up_times_out_with_what_to_check(self, silent_port,
                                                                        tmp_path):
        started = time.monotonic()
        r = rgpu_run("--host", "me@127.0.0.1", "--ssh-port", str(silent_port),
                     "-o", f"UserKnownHostsFile={tmp_path / 'known_hosts'}",
                     "--timeout", "1", "--", "true")
        assert time.monotonic() - started < 10
        assert r.returncode == 125
        # Either ssh's ConnectTimeout (the same second) or rgpu-run's own deadline ends it.
        assert ("did not set up the tunnel within 1 s" in r.stderr
                or "ssh cannot reach 127.0.0.1" in r.stderr and "timed out" in r.stderr), r.stderr
        assert "--timeout" in r.stderr

    def test_sigterm_during_setup_stops_rgpu_run_and_ssh(self, silent_port, tmp_path):
        key = tmp_path / "key"
        key.write_text("")
        proc = start_rgpu_run("--host", "me@127.0.0.1", "--ssh-port", str(silent_port),
                              "-i", str(key), "--", "true")
        deadline = time.monotonic() + 10
        while not ssh_pids_using(key) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ssh_pids_using(key), "rgpu-run did not start ssh"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 128 + signal.SIGTERM
        assert "stopped by SIGTERM while setting up the tunnel" in err
        assert ssh_pids_using(key) == []
