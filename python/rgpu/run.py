"""rgpu-run: run one command against a GPU machine reached through an SSH tunnel.

rgpu-server (driver path, port 9713) and rgpu-opserver (PyTorch device, port 9720) listen on the
GPU machine's loopback by default, so a client elsewhere needs a way in. This tool opens one with
the system `ssh` client (`ssh -N -L ...`: local forwards from free loopback ports here to those
ports there), waits until each forward answers, points RGPU_SERVER and RGPU_OPSERVER at the
forwards, runs the command, and closes the tunnel when the command ends. Its exit status is the
command's. With --server/--opserver HOST:PORT it skips the tunnel for that service and points the
variable straight at the address (for a GPU machine reachable directly, or a tunnel of your own).

How it knows the far end answers: ssh runs at LogLevel DEBUG2, which logs "open confirm" when the
GPU machine's sshd has connected a forwarded connection to its port, and "open failed: connect
failed: Connection refused" when nothing listens there. rgpu-run connects once to each forward
and reads which of the two ssh logs (see _SshLog). The probe connection sends nothing and closes,
so the server sees one connection that ends before its handshake.

Run as `rgpu-run` (the console script) or `python -m rgpu.run`; `--help` is the manual.

This module must work without torch: it imports nothing from rgpu at import time, and looks up
the shim folder (--shim) through a guarded import only when asked.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SERVER_PORT = 9713
DEFAULT_OPSERVER_PORT = 9720
DEFAULT_TIMEOUT_S = 30.0

# Exit statuses of rgpu-run's own failures, as `docker run` and `env` use them, so that a caller
# can tell them from the command's: 2 bad usage, 125 the tunnel or setup failed, 126 the command
# cannot be executed, 127 the command was not found.
EXIT_USAGE = 2
EXIT_SETUP = 125
EXIT_CANNOT_EXECUTE = 126
EXIT_NOT_FOUND = 127

# How often a failed `bind` race on the local ports is retried with fresh ports.
_BIND_ATTEMPTS = 3

_USAGE_EXAMPLES = """\
examples:
  rgpu-run --host me@gpu-host -- python train.py
        tunnel to gpu-host's rgpu-server (9713) and rgpu-opserver (9720), run train.py
  rgpu-run --host me@gpu-host --ssh-port 2222 -i ~/.ssh/gpu_key --shim -- ./my_cuda_program
        the driver path: LD_LIBRARY_PATH also gets rgpu's libcuda.so.1 first, and LD_PRELOAD
        its libnccl.so.2 (for PyTorch's NCCL)
  rgpu-run --opserver 10.0.0.5:9720 -- python train.py
        no tunnel: RGPU_OPSERVER=10.0.0.5:9720

environment set for the command:
  RGPU_SERVER      127.0.0.1:<local port> forwarded to the GPU machine's --server-port
                   (or the --server address as given)
  RGPU_OPSERVER    127.0.0.1:<local port> forwarded to the GPU machine's --opserver-port
                   (or the --opserver address as given)
  LD_LIBRARY_PATH  with --shim only: the folder of rgpu's libcuda.so.1 put first
  LD_PRELOAD       with --shim only: rgpu's libnccl.so.2 from that folder put first, when it is
                   there (not with --no-nccl), so PyTorch's NCCL calls run on the GPU machine:
                   libtorch_cuda.so's RPATH would find the pip package's libnccl.so.2 first
  RGPU_PROGRESS    with --progress 1, with --no-progress 0 (unset: the shim shows progress
                   when the command's stderr is a terminal)
  Everything else (RGPU_TOKEN, ...) passes through unchanged.

the tunnel:
  ssh -N with BatchMode=yes (no password prompts: use a key, -i or ssh-agent),
  ExitOnForwardFailure=yes, ServerAliveInterval=15, ControlMaster=no, local forwards bound to
  127.0.0.1 only. Your ~/.ssh/config applies (Host aliases, ProxyJump, User, ...).
  rgpu-run checks that something listens on each forwarded port on the GPU machine. If nothing
  listens on either, it stops; if one of the two is missing it says so and runs the command
  anyway (a PyTorch program needs only rgpu-opserver), unless --shim is given and rgpu-server
  is the one missing.

signals and exit status:
  Ctrl-C, SIGTERM, SIGHUP and SIGQUIT are passed on to the command (Ctrl-C at a terminal reaches
  it directly, so rgpu-run does not send it twice); the tunnel closes once the command has ended.
  The exit status is the command's, 128+N if a signal N killed it; rgpu-run's own failures exit
  125 (tunnel or setup), 126 (command not executable), 127 (command not found), 2 (usage).
"""


class SetupError(Exception):
    """A failure before the command runs; the message says what happened and what to do."""

    def __init__(self, message: str, status: int = EXIT_SETUP):
        super().__init__(message)
        self.status = status


class _Interrupted(Exception):
    """A signal arrived while the tunnel was being set up (before the command started)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Service:
    """One of the two rgpu services the command may talk to, and how it is reached."""

    name: str  # "rgpu-server" or "rgpu-opserver", as the user starts it on the GPU machine
    env_var: str  # RGPU_SERVER or RGPU_OPSERVER
    remote_port: int  # the port on the GPU machine's loopback, when tunnelled
    direct: str | None = None  # HOST:PORT given with --server/--opserver: no tunnel
    local_port: int = 0  # the forward's port on 127.0.0.1 here, once chosen
    answered: bool = False  # the far end accepted the probe connection

    def address(self) -> str:
        return self.direct if self.direct else f"127.0.0.1:{self.local_port}"


# --------------------------------------------------------------------------------------------
# Command line


def _host_port(text: str) -> str:
    """argparse type for HOST:PORT (IPv6 as [::1]:9713), or tls://HOST:PORT for a server started
    with --tls; returns it unchanged."""
    bare = text[len("tls://"):] if text.startswith("tls://") else text
    host, sep, port = bare.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not HOST:PORT (for example gpu-host:9720, [::1]:9720 or tls://gpu-host:9720)")
    return text


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)")
    return int(text)


def _version() -> str:
    """The release, from the VERSION file that rgpu/__init__.py reads (rgpu/VERSION installed, the
    source tree's otherwise), read here directly because this file also runs as a plain script."""
    here = Path(__file__).resolve().parent
    for path in (here / "VERSION", here.parents[1] / "VERSION"):
        if path.is_file():
            return path.read_text().strip()
    return "unknown"


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rgpu-run",
        usage="rgpu-run (--host [USER@]HOST | --server HOST:PORT | --opserver HOST:PORT)"
        " [options] -- COMMAND [ARG...]",
        description="Run COMMAND with RGPU_SERVER and RGPU_OPSERVER pointing at a GPU machine "
        "running rgpu-server and/or rgpu-opserver, through an SSH tunnel that lives as long as "
        "the command.",
        epilog=_USAGE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = p.add_argument_group("where the GPU machine is")
    where.add_argument("--host", metavar="[USER@]HOST",
                       help="reach the GPU machine through `ssh [USER@]HOST` (any name ssh "
                       "accepts, including a Host alias from ~/.ssh/config)")
    where.add_argument("--server", metavar="HOST:PORT", type=_host_port,
                       help="rgpu-server's address, reachable directly: no tunnel for it")
    where.add_argument("--opserver", metavar="HOST:PORT", type=_host_port,
                       help="rgpu-opserver's address, reachable directly: no tunnel for it")
    ssh = p.add_argument_group("the SSH tunnel (with --host)")
    ssh.add_argument("--ssh-port", metavar="N", type=_port,
                     help="the GPU machine's SSH port (default: ssh's, normally 22)")
    ssh.add_argument("-i", dest="identity", metavar="KEY",
                     help="private key file for ssh (as `ssh -i`); without it ssh uses "
                     "ssh-agent and its usual keys")
    ssh.add_argument("-o", "--ssh-option", dest="ssh_options", metavar="OPTION",
                     action="append", default=[],
                     help="extra ssh option, as `ssh -o OPTION` (repeatable), e.g. "
                     "-o ProxyJump=bastion")
    ssh.add_argument("--server-port", metavar="N", type=_port, default=DEFAULT_SERVER_PORT,
                     help=f"rgpu-server's port on the GPU machine's loopback "
                     f"(default {DEFAULT_SERVER_PORT})")
    ssh.add_argument("--opserver-port", metavar="N", type=_port, default=DEFAULT_OPSERVER_PORT,
                     help=f"rgpu-opserver's port on the GPU machine's loopback "
                     f"(default {DEFAULT_OPSERVER_PORT})")
    ssh.add_argument("--timeout", metavar="SECONDS", type=float, default=DEFAULT_TIMEOUT_S,
                     help=f"how long to wait for ssh to log in and for the forwards to answer "
                     f"(default {DEFAULT_TIMEOUT_S:g})")
    ssh.add_argument("--no-check", dest="check", action="store_false",
                     help="do not check that rgpu-server/rgpu-opserver answer on the GPU "
                     "machine before running the command")
    run = p.add_argument_group("the command")
    run.add_argument("--shim", "--driver-path", dest="shim", action="store_true",
                     help="driver path: put the folder of rgpu's libcuda.so.1 first in "
                     "LD_LIBRARY_PATH, so an unmodified CUDA program uses rgpu (found through "
                     "the installed rgpu package's lib_dir(), else a build/lib beside this "
                     "source tree; or give --shim-dir), and preload rgpu's libnccl.so.2 from "
                     "that folder when it is there")
    run.add_argument("--shim-dir", metavar="DIR",
                     help="the folder holding rgpu's libcuda.so.1 (implies --shim)")
    run.add_argument("--no-nccl", dest="nccl", action="store_false",
                     help="with --shim, do not preload rgpu's libnccl.so.2: the command's own NCCL "
                     "then runs here, over the driver shim, at a round trip per driver call")
    run.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="say on stderr how far long transfers are (kernel-image uploads and large "
                     "copies that take over 2 s): --progress always, --no-progress never; by default "
                     "when the command's stderr is a terminal (sets RGPU_PROGRESS for the command)")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="say what rgpu-run does: the ssh command line, ports, checks")
    run.add_argument("--version", action="version", version=f"rgpu-run {_version()}",
                     help="print rgpu-run's version and exit")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG...]",
                     help="the command to run, after --")
    return p


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = _build_parser()
    # Everything after the first "--" is the command, untouched, even if it looks like one of
    # our options; without "--" argparse's REMAINDER takes everything from the first word that
    # is not an option of ours.
    if "--" in argv:
        cut = argv.index("--")
        args = parser.parse_args(argv[:cut])
        if args.command:
            parser.error(f"unexpected {shlex.join(args.command)!r} before '--'; "
                         "put rgpu-run's options before '--' and the command after it")
        args.command = argv[cut + 1:]
    else:
        args = parser.parse_args(argv)
    if not args.command:
        parser.error("no command to run; give it after '--', e.g. rgpu-run --host gpu-host -- "
                     "python train.py")
    if not (args.host or args.server or args.opserver):
        parser.error("say where the GPU machine is: --host [USER@]HOST to go through SSH, or "
                     "--server/--opserver HOST:PORT to connect directly")
    if args.shim_dir:
        args.shim = True
    if args.timeout <= 0:
        parser.error("--timeout must be a positive number of seconds")
    return args


# --------------------------------------------------------------------------------------------
# The ssh process and what it logs


def _die_with_parent():
    """A preexec_fn that has the kernel send ssh SIGTERM when rgpu-run dies, even by SIGKILL:
    ssh runs in its own session, so a kill of rgpu-run's process group would miss it and leave
    the tunnel open. Linux only (prctl PR_SET_PDEATHSIG); None elsewhere. The function it
    returns touches nothing but libc's prctl, so it is safe in the child between fork and exec
    even though our stderr reader threads exist."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # noqa: PLC0415

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    parent = os.getpid()

    def set_pdeathsig():
        prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # rgpu-run died before prctl took effect
            os._exit(1)

    return set_pdeathsig


def _free_local_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now. ssh binds them a moment later; losing that race shows as
    "Address already in use" and Tunnel.open tries again with new ports."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class _SshLog:
    """Reads ssh's stderr on a thread: keeps its last lines for error messages, and turns the
    DEBUG2 lines about forwarded connections into outcomes per local port.

    The lines it relies on (OpenSSH's channels.c, stable since OpenSSH 5):
      debug1: Connection to port 40123 forwarding to 127.0.0.1 port 9720 requested.
      debug1: channel 2: new direct-tcpip [direct-tcpip] ...     (older: "new [direct-tcpip]")
      debug2: channel 2: open confirm rwindow 2097152 rmax 32768
      channel 2: open failed: connect failed: Connection refused
    """

    _REQUESTED = re.compile(r"Connection to port (\d+) forwarding to \S+ port (\d+) requested")
    _NEW = re.compile(r"channel (\d+): new\b.*direct-tcpip")
    _CONFIRM = re.compile(r"channel (\d+): open confirm")
    _FAILED = re.compile(r"channel (\d+): open failed: (.*)")
    # Lines ssh prints at its normal log levels that say nothing about a failure.
    _QUIET = ("Authenticated to ", "Transferred: ", "Bytes per second",
              "Warning: Permanently added", "Exit status")

    def __init__(self, stream, describe_port):
        self._stream = stream
        self._describe_port = describe_port  # local port -> "gpu-host:9720 (rgpu-opserver)"
        self._cond = threading.Condition()
        self._last = collections.deque(maxlen=20)  # recent lines that are not debug output
        self._all = collections.deque(maxlen=400)  # recent lines, debug included (--verbose)
        self._pending_port = None  # local port of the last "requested" line
        self._channel_port = {}  # ssh channel id -> local port
        self._outcomes = []  # (sequence number, local port, None if confirmed else reason)
        self._seq = 0
        self.eof = False
        self.live = False  # the command runs: pass ssh's complaints on to the user
        self.closing = False  # we are stopping ssh: say nothing more
        self._thread = threading.Thread(target=self._read, name="ssh-stderr", daemon=True)
        self._thread.start()

    def _read(self):
        for raw in iter(self._stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            with self._cond:
                self._all.append(line)
                if line.strip() and not line.startswith(("debug", *self._QUIET)):
                    self._last.append(line)
                self._parse(line)
                self._cond.notify_all()
        with self._cond:
            self.eof = True
            self._cond.notify_all()
            if self.live and not self.closing:
                last = list(self._last)[-1:]
                _say("the SSH tunnel closed while the command runs"
                     + (f" (ssh said: {last[0]})" if last else "")
                     + "; its connections to rgpu are lost.")

    def _parse(self, line):
        if m := self._REQUESTED.search(line):
            self._pending_port = int(m.group(1))
        elif (m := self._NEW.search(line)) and self._pending_port is not None:
            self._channel_port[int(m.group(1))] = self._pending_port
            self._pending_port = None
        elif m := self._CONFIRM.search(line):
            self._outcome(int(m.group(1)), None)
        elif m := self._FAILED.search(line):
            port = self._outcome(int(m.group(1)), m.group(2))
            if self.live and not self.closing:
                where = self._describe_port(port) if port else "the GPU machine"
                _say(f"a connection through the tunnel to {where} failed ({m.group(2)}); "
                     "is it still running there?")
        elif (self.live and not self.closing and line.strip()
              and not line.startswith(("debug", "Killed by signal", *self._QUIET))):
            _say(f"ssh: {line}")

    def _outcome(self, channel, reason):
        port = self._channel_port.get(channel)
        if port is not None:
            self._seq += 1
            self._outcomes.append((self._seq, port, reason))
            del self._outcomes[:-50]
        return port

    def mark(self) -> int:
        """A point in the log; outcome() looks only at what came after it."""
        with self._cond:
            return self._seq

    def outcome(self, local_port, after, timeout):
        """("confirmed"|"failed"|"none", reason) for the first forwarded connection on
        local_port that ssh reported on after the mark `after`, waiting up to timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for seq, port, reason in self._outcomes:
                    if seq > after and port == local_port:
                        return ("confirmed", None) if reason is None else ("failed", reason)
                left = deadline - time.monotonic()
                if left <= 0 or self.eof:
                    return "none", None
                self._cond.wait(left)

    def last_lines(self, n=3) -> list[str]:
        with self._cond:
            return list(self._last)[-n:]

    def all_lines(self) -> list[str]:
        with self._cond:
            return list(self._all)

    def join(self, timeout):
        self._thread.join(timeout)


def _explain_ssh_failure(lines: list[str], login: str, try_cmd: str, status) -> str:
    """What went wrong from ssh's last words, and what to try. login is --host as given."""
    host = login.rpartition("@")[2]
    text = "\n".join(lines)
    last = lines[-1] if lines else "(ssh printed nothing)"
    said = f"ssh said: {last}"
    if "Address already in use" in text:
        return (f"ssh could not listen on the local ports it was given, other programs took "
                f"them first ({said}), {_BIND_ATTEMPTS} times in a row. Run rgpu-run again.")
    # Key file trouble first: ssh goes on without the key and then fails to log in.
    key_line = next((line for line in lines if line.startswith("Load key")), None)
    if "UNPROTECTED PRIVATE KEY FILE" in text or "bad permissions" in text:
        return (f"ssh ignored the key file because others may read it: ssh said: "
                f"{key_line or last}\nMake it private (chmod 600 KEY) and run rgpu-run again.")
    if key_line:
        return (f"ssh cannot use the key file: ssh said: {key_line}\nGive -i the private key "
                "file (not the .pub), in OpenSSH or PEM format.")
    if "Permission denied" in text or "Too many authentication failures" in text:
        return (f"ssh could not log in to {login}: {said}\n"
                "rgpu-run runs ssh in batch mode, without password prompts, so it needs a key "
                "that the GPU machine accepts: give one with -i KEY, or load it into ssh-agent "
                "(a key with a passphrase must be in the agent), and check that its public key "
                f"is in ~/.ssh/authorized_keys of that user there. The same login by hand: "
                f"{try_cmd}")
    if "Host key verification failed" in text or "IDENTIFICATION HAS CHANGED" in text:
        return (f"ssh does not trust {host}'s host key: {said}\n"
                f"Connect once by hand to check and accept it ({try_cmd}), then run rgpu-run "
                "again.")
    if "Could not resolve hostname" in text:
        return f"ssh cannot resolve {host}: {said}\nCheck the name given to --host."
    if "Connection refused" in text and "connect to host" in text:
        return (f"nothing accepts SSH connections at {host}: {said}\n"
                "Check that sshd runs there and that the port is right (--ssh-port).")
    if any(s in text for s in ("timed out", "No route to host", "Network is unreachable",
                               "Connection closed by", "Connection reset")):
        return (f"ssh cannot reach {host}: {said}\n"
                f"Check the host name, the network and any firewall (try: {try_cmd}); "
                "a slow link needs a longer --timeout.")
    if "administratively prohibited" in text or "forwarding" in text.lower():
        return (f"the SSH server on {host} refused the port forwarding: {said}\n"
                "Its sshd_config must allow it (AllowTcpForwarding yes or local); or give "
                "--server/--opserver HOST:PORT if the ports are reachable directly.")
    code = f" with status {status}" if status is not None else ""
    return f"ssh exited{code}: {said}\nTo see why, try: {try_cmd} (add -v for more)"


class Tunnel:
    """An `ssh -N -L ...` process forwarding local ports to the GPU machine's loopback."""

    def __init__(self, args: argparse.Namespace, services: list[Service]):
        self.args = args
        self.services = services
        self.host = args.host.rpartition("@")[2]  # for messages: "gpu-host"
        self.proc: subprocess.Popen | None = None
        self.log: _SshLog | None = None

    def _ssh_base(self) -> list[str]:
        cmd = []
        if self.args.ssh_port:
            cmd += ["-p", str(self.args.ssh_port)]
        if self.args.identity:
            cmd += ["-i", self.args.identity]
        return cmd

    def try_command(self) -> str:
        """The same login by hand, for error messages."""
        extra = []
        for opt in self.args.ssh_options:
            extra += ["-o", opt]
        return shlex.join(["ssh", *self._ssh_base(), *extra, self.args.host, "true"])

    def _ssh_command(self, ssh: str) -> list[str]:
        # ssh uses the first value it sees for an option: ours that the checks depend on come
        # before the user's -o, the ones a user may want to tune come after.
        cmd = [ssh, "-N", "-n", "-T",
               "-o", "LogLevel=DEBUG2",  # for "open confirm" / "open failed" (see _SshLog)
               "-o", "BatchMode=yes",  # never prompt: there is no one to answer
               "-o", "ExitOnForwardFailure=yes",
               "-o", "ControlMaster=no", "-o", "ControlPath=none",  # this process is the tunnel
               "-o", "ForwardAgent=no", "-o", "ForwardX11=no", "-o", "PermitLocalCommand=no",
               *self._ssh_base()]
        for opt in self.args.ssh_options:
            cmd += ["-o", opt]
        cmd += ["-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3",
                "-o", f"ConnectTimeout={max(1, int(self.args.timeout))}"]
        for s in self.services:
            cmd += ["-L", f"127.0.0.1:{s.local_port}:127.0.0.1:{s.remote_port}"]
        cmd.append(self.args.host)
        return cmd

    def describe_port(self, local_port: int) -> str:
        for s in self.services:
            if s.local_port == local_port:
                return f"{self.host}:{s.remote_port} ({s.name})"
        return f"{self.host}"

    def open(self, signals: "_Signals"):
        """Starts ssh and waits until every forward listens, then (unless --no-check) until the
        GPU machine's sshd has reached each port there or failed to. Retries with fresh ports
        when another program took a chosen local port first. Sets Service.answered; returns
        {service name: reason} for the ports that did not answer. Raises SetupError."""
        ssh = shutil.which("ssh")
        if ssh is None:
            raise SetupError(
                "rgpu-run needs the OpenSSH client `ssh` on PATH to reach "
                f"{self.args.host}, and there is none. Install it (Debian/Ubuntu: apt-get "
                "install openssh-client), or skip the tunnel with --server/--opserver HOST:PORT "
                "if the GPU machine's ports are reachable directly.")
        if self.args.identity and not os.path.isfile(self.args.identity):
            raise SetupError(f"the key file {self.args.identity!r} given with -i does not "
                             "exist; give the path of the private key (not the .pub)")
        if self.args.identity and self.args.identity.endswith(".pub"):
            raise SetupError(f"-i takes the private key file, and {self.args.identity!r} is "
                             f"the public half; give {self.args.identity[:-4]!r}")
        for attempt in range(_BIND_ATTEMPTS):
            for s, port in zip(self.services, _free_local_ports(len(self.services))):
                s.local_port = port
            cmd = self._ssh_command(ssh)
            _note(self.args, f"starting {shlex.join(cmd)}")
            # Its own session: Ctrl-C at the terminal must not reach ssh, which we stop only
            # after the command has ended. Signals wait until self.proc is set, so that an
            # interrupted start cannot leave an ssh behind.
            with signals.deferred():
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                             start_new_session=True,
                                             preexec_fn=_die_with_parent())
            self.log = _SshLog(self.proc.stderr, self.describe_port)
            try:
                return self._connect_all()
            except SetupError:
                in_use = any("Address already in use" in line for line in self.log.all_lines())
                self.close()
                if not in_use or attempt == _BIND_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _connect_all(self) -> dict[str, str]:
        deadline = time.monotonic() + self.args.timeout
        failures = {}
        for s in self.services:
            # The first connection that the forward accepts is also the far-end check.
            mark, probe = self._connect(s, deadline)
            try:
                if not self.args.check:
                    continue
                result, reason = self._await_probe(s, probe, mark, deadline)
            finally:
                probe.close()
            if result == "confirmed":
                s.answered = True
                _note(self.args, f"{self.host}:{s.remote_port} ({s.name}) answers")
            else:
                failures[s.name] = reason
        return failures

    def _connect(self, s: Service, deadline: float) -> tuple[int, socket.socket]:
        """Waits until ssh listens on s.local_port (it does once logged in) and connects."""
        while True:
            if self.proc.poll() is not None:
                self.log.join(1.0)
                raise SetupError(self._failure_message())
            mark = self.log.mark()
            try:
                return mark, socket.create_connection(("127.0.0.1", s.local_port), 1.0)
            except OSError:
                pass
            if time.monotonic() > deadline:
                last = self.log.last_lines(1)
                raise SetupError(
                    f"ssh to {self.args.host} did not set up the tunnel within "
                    f"{self.args.timeout:g} s" + (f" (ssh said: {last[0]})" if last else "")
                    + f".\nCheck that a login works: {self.try_command()}; a slow link needs "
                    "a longer --timeout.")
            time.sleep(0.05)

    def _failure_message(self) -> str:
        lines = self.log.last_lines(3)
        if self.args.verbose:
            _say("ssh's output:\n  " + "\n  ".join(self.log.all_lines()))
        return _explain_ssh_failure(lines, self.args.host, self.try_command(),
                                    self.proc.returncode)

    def _await_probe(self, s, probe, mark, deadline):
        """("confirmed", None) or ("failed", reason) for the probe connection."""
        probe.setblocking(False)
        while True:
            result, reason = self.log.outcome(s.local_port, mark, 0.05)
            if result != "none":
                return result, reason
            if self.proc.poll() is not None:
                self.log.join(1.0)
                raise SetupError(
                    "the SSH tunnel closed while checking the GPU machine's ports.\n"
                    + self._failure_message())
            readable, _, _ = select.select([probe], [], [], 0)
            if readable:
                try:
                    closed = probe.recv(1) == b""
                except OSError:
                    closed = True
                if closed:
                    # ssh closes our end when the far end refuses; its log line says why.
                    result, reason = self.log.outcome(s.local_port, mark, 1.0)
                    return "failed", reason or "the tunnel closed the connection"
            if time.monotonic() > deadline:
                return "failed", (f"no answer within {self.args.timeout:g} s (a firewall on "
                                  "the GPU machine's loopback, or a very slow link)")

    def close(self):
        """Stops ssh (SIGTERM, then SIGKILL after 2 s) and waits for it."""
        if self.log:
            self.log.closing = True
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(2.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log:
            self.log.join(1.0)


# --------------------------------------------------------------------------------------------
# Running the command


def _say(message: str):
    """One message on stderr; lines after the first are indented under the first."""
    print("rgpu-run: " + message.replace("\n", "\n  "), file=sys.stderr, flush=True)


def _note(args, message: str):
    if args.verbose:
        _say(message)


def _shim_dir(args) -> str:
    """The folder of rgpu's libcuda.so.1 for --shim. The rgpu package is imported only here and
    guarded: its __init__ may need torch, which the driver path does not."""
    if args.shim_dir:
        candidates = [args.shim_dir]
    else:
        candidates = []
        try:
            import rgpu  # noqa: PLC0415 (lazy on purpose, see above)

            candidates.append(str(rgpu.lib_dir()))
        except Exception as e:  # noqa: BLE001 (any failure means: look elsewhere)
            _note(args, f"rgpu.lib_dir() unavailable ({type(e).__name__}: {e})")
        # A source checkout: <repo>/python/rgpu/run.py beside <repo>/build/lib.
        candidates.append(str(Path(__file__).resolve().parents[2] / "build" / "lib"))
    for d in candidates:
        if os.path.isfile(os.path.join(d, "libcuda.so.1")):
            # Absolute: the command may change directory before it loads the libraries.
            return os.path.abspath(d)
    raise SetupError(
        f"--shim: no libcuda.so.1 in {', '.join(candidates)}. Build rgpu (scripts/setup.sh) or "
        "install the rgpu package, or give the folder with --shim-dir DIR.",
        EXIT_USAGE)


class _Signals:
    """Signal handling across rgpu-run's life: while the tunnel is set up a signal aborts it
    (raising _Interrupted); while the command starts signals are kept; once it runs they are
    passed on to it. SIGINT and SIGQUIT typed at a terminal already reach the command (same
    process group, in the terminal's foreground), so they are passed on only when sent some
    other way, e.g. `kill -INT <rgpu-run>`."""

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

    def __init__(self):
        self.child: subprocess.Popen | None = None
        self.starting = False
        self.kept: list[int] = []
        self._previous = {sig: signal.signal(sig, self._handle) for sig in self.HANDLED}

    def restore(self):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, _frame):
        if self.child is not None:
            self._forward(signum)
        elif self.starting:
            self.kept.append(signum)
        else:
            raise _Interrupted(signum)

    @contextlib.contextmanager
    def deferred(self):
        """Keeps signals during a process start (so that the start completes and the process is
        known), then raises _Interrupted for the first one kept, if any."""
        self.starting = True
        try:
            yield
        finally:
            self.starting = False
        if self.kept:
            raise _Interrupted(self.kept[0])

    def started(self, child: subprocess.Popen):
        self.child = child
        self.starting = False
        for signum in self.kept:
            self._forward(signum)

    def _forward(self, signum):
        if signum in (signal.SIGINT, signal.SIGQUIT) and _in_terminal_foreground():
            return
        if self.child.poll() is None:
            try:
                self.child.send_signal(signum)
            except ProcessLookupError:
                pass


def _in_terminal_foreground() -> bool:
    """True when our process group (which the command shares) is the foreground group of our
    controlling terminal, so a Ctrl-C typed there went to the command too."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _services(args) -> list[Service]:
    return [
        Service("rgpu-server", "RGPU_SERVER", args.server_port, direct=args.server),
        Service("rgpu-opserver", "RGPU_OPSERVER", args.opserver_port, direct=args.opserver),
    ]


def _set_up(args, signals: _Signals) -> tuple[dict, Tunnel | None]:
    """The command's environment, and the tunnel if one is needed (open and checked)."""
    services = _services(args)
    env = dict(os.environ)
    if args.shim:
        d = _shim_dir(args)
        old = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = f"{d}:{old}" if old else d
        nccl = os.path.join(d, "libnccl.so.2")
        if args.nccl and os.path.isfile(nccl):
            # libtorch_cuda.so's RPATH names the pip package's libnccl.so.2, and the loader
            # searches RPATH before LD_LIBRARY_PATH; a preloaded library is found before both.
            old = env.get("LD_PRELOAD")
            env["LD_PRELOAD"] = f"{nccl}:{old}" if old else nccl
            _note(args, f"LD_PRELOAD={env['LD_PRELOAD']}")
    if args.progress is not None:
        env["RGPU_PROGRESS"] = "1" if args.progress else "0"
    tunnelled = [s for s in services if not s.direct] if args.host else []
    for s in services:
        if s.direct:
            env[s.env_var] = s.direct
    if not tunnelled:
        return env, None

    tunnel = Tunnel(args, tunnelled)
    try:
        failures = tunnel.open(signals)
    except BaseException:
        tunnel.close()
        raise
    for s in tunnelled:
        env[s.env_var] = s.address()
        _note(args, f"{s.env_var}={s.address()} -> {tunnel.host}:{s.remote_port}")
    if failures:
        missing = [(s, _explain_refusal(tunnel.host, s, failures[s.name])) for s in tunnelled if s.name in failures]
        # One missing service is normal (a PyTorch program needs only rgpu-opserver), unless
        # the command is on the driver path and the missing one is rgpu-server.
        fatal = len(failures) == len(tunnelled) or (args.shim and "rgpu-server" in failures)
        if fatal:
            tunnel.close()
            raise SetupError("\n".join(line for _, line in missing))
        for s, line in missing:
            # A PyTorch-device user (the quick start) runs no rgpu-server: saying so on every run
            # is noise, kept for --verbose. A missing rgpu-opserver is always worth a line.
            message = f"note: {line} Running the command anyway."
            if s.name == "rgpu-server":
                _note(args, message)
            else:
                _say(message)
    return env, tunnel


def _explain_refusal(host: str, s: Service, reason: str) -> str:
    flag = "--server-port" if s.env_var == "RGPU_SERVER" else "--opserver-port"
    if "prohibited" in reason:
        return (f"the SSH server on {host} does not allow forwarding to port {s.remote_port} "
                f"({reason}); its sshd_config must allow TCP forwarding (AllowTcpForwarding, "
                "PermitOpen).")
    if "refused" in reason.lower() or "closed" in reason:
        return (f"nothing listens on {host}:{s.remote_port} ({reason}); start {s.name} there "
                f"(or give the port it listens on with {flag}).")
    return f"{s.name} on {host}:{s.remote_port} does not answer: {reason}."


def main(argv: list[str] | None = None) -> int:
    """Entry point of the rgpu-run console script; returns the exit status."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    signals = _Signals()
    tunnel = None
    try:
        try:
            env, tunnel = _set_up(args, signals)
        except SetupError as e:
            _say(str(e))
            return e.status
        except _Interrupted as e:
            _say(f"stopped by {e} while setting up the tunnel")
            return 128 + e.signum
        if tunnel:
            tunnel.log.live = True
        signals.starting = True
        try:
            child = subprocess.Popen(args.command, env=env)
        except FileNotFoundError:
            _say(f"cannot run {args.command[0]!r}: no such command or file; check the name "
                 "and PATH")
            return EXIT_NOT_FOUND
        except (PermissionError, OSError) as e:
            _say(f"cannot run {args.command[0]!r}: {e.strerror or e}; check that it is an "
                 "executable file")
            return EXIT_CANNOT_EXECUTE
        signals.started(child)
        returncode = child.wait()
        if tunnel:
            tunnel.log.closing = True
        return _exit_status(returncode)
    finally:
        if tunnel:
            tunnel.close()
        signals.restore()


if __name__ == "__main__":
    sys.exit(main())
