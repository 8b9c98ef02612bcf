"""rgpu-faultproxy (tools/faultproxy) driven from tests: one proxy process on a free loopback port
in front of a server, breaking connections as its arguments say. Shared by tests/e2e (the driver
path) and tests/python (the PyTorch device)."""
import signal
import socket
import subprocess
import time


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FaultProxy:
    def __init__(self, binary, target, *args):
        self.port = _free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([str(binary), "--listen", self.addr, "--target", target, *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                # A connection of its own: faulty ones are counted from the next.
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("rgpu-faultproxy did not start listening")

    def strike(self):
        """With --on-signal: breaks every faulty connection open now."""
        self.proc.send_signal(signal.SIGUSR1)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(5)
