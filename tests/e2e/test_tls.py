"""TLS 1.3 on the driver path (issue 17): the driver-API program over tls:// to rgpu-server with
--tls auto (pinned fingerprint) and with a CA-signed certificate and a token; refusals that say
what to do (an untrusted certificate shows its fingerprint, a missing client certificate, a
plaintext client at a TLS server and the reverse, each quick); a resume over TLS through
rgpu-faultproxy; and the round trips TLS adds to a process's connect, measured through
rgpu-delay-proxy. Certificates are made with the `openssl` command."""
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import BUILD, IMAGE, Server, free_port, restart_on_port, run_client, wait_for_port
from fault_proxy import FaultProxy

PROGRAM = str(BUILD / "bin/driver_api_test")
RECONNECT = str(BUILD / "bin/reconnect_test")


@pytest.fixture
def short_dir():
    # Short: a session socket's path must fit a Unix socket address (108 bytes).
    d = tempfile.mkdtemp(prefix="rgpu-tls-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def fingerprint(server):
    m = re.search(r"fingerprint (sha256:[0-9a-f]{64})", server.text())
    assert m, server.text()
    return m.group(1)


def tls_server(state_dir, *extra, token=None):
    return Server(token=token, extra_args=["--tls", "auto", "--state-dir", state_dir, "--runtime-dir", state_dir,
                                           *extra])


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", f"/CN={name}", "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.crt")
    return f"{d}/{name}.crt", f"{d}/{name}.key"


def make_signed(d, name, ca, san):
    ca_crt, ca_key = ca
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.csr")
    tmp = f"{d}/{name}.ext"
    with open(tmp, "w") as f:
        f.write(f"subjectAltName={san}\n")
    openssl("x509", "-req", "-in", f"{d}/{name}.csr", "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial", "-days", "2",
            "-extfile", tmp, "-out", f"{d}/{name}.crt")
    return f"{d}/{name}.crt", f"{d}/{name}.key"


def test_driver_api_program_over_tls_with_a_pinned_fingerprint(short_dir):
    server = tls_server(short_dir)
    try:
        fp = fingerprint(server)
        r = run_client([PROGRAM, IMAGE], "tls://" + server.addr, env_extra={"RGPU_TLS_FINGERPRINT": fp})
        assert r.returncode == 0, r.stdout + r.stderr
        assert "checks passed" in r.stdout
        assert "session for" in server.text()
        # --tls auto keeps its certificate: a restarted server has the same fingerprint.
        server.stop()
        again = tls_server(short_dir)
        try:
            assert fingerprint(again) == fp
        finally:
            again.stop()
    finally:
        server.stop()


def test_driver_api_program_over_tls_with_a_ca_and_a_token(short_dir):
    ca = make_ca(short_dir, "ca")
    cert, key = make_signed(short_dir, "server", ca, "IP:127.0.0.1,DNS:localhost")
    server = Server(token="s3cret", extra_args=["--tls-cert", cert, "--tls-key", key, "--runtime-dir", short_dir])
    try:
        r = run_client([PROGRAM, IMAGE], f"tls://localhost:{server.port}", token="s3cret",
                       env_extra={"RGPU_TLS_CA": ca[0]})
        assert r.returncode == 0, r.stdout + r.stderr
        # A wrong token is still refused over TLS.
        r = run_client([PROGRAM, IMAGE], f"tls://127.0.0.1:{server.port}", token="wrong",
                       env_extra={"RGPU_TLS_CA": ca[0], "RGPU_CONNECT_TIMEOUT": "10"}, timeout=30)
        assert r.returncode != 0
        assert "proof did not match" in r.stderr, r.stderr
    finally:
        server.stop()


def test_an_untrusted_certificate_is_refused_with_its_fingerprint_and_how_to_pin_it(short_dir):
    server = tls_server(short_dir)
    try:
        fp = fingerprint(server)
        start = time.time()
        r = run_client([PROGRAM, IMAGE], "tls://" + server.addr, env_extra={"RGPU_CONNECT_TIMEOUT": "30"}, timeout=60)
        assert r.returncode != 0
        assert time.time() - start < 10, "a certificate that does not verify is an answer, not a reason to retry"
        assert f"set RGPU_TLS_FINGERPRINT={fp} to trust it" in r.stderr, r.stderr
        # A pin that does not match is refused with the one seen.
        r = run_client([PROGRAM, IMAGE], "tls://" + server.addr,
                       env_extra={"RGPU_TLS_FINGERPRINT": "sha256:" + "0" * 64}, timeout=60)
        assert r.returncode != 0
        assert f"has fingerprint {fp}" in r.stderr, r.stderr
    finally:
        server.stop()


def test_a_plaintext_client_at_a_tls_server_is_told_to_use_tls_quickly(short_dir):
    server = tls_server(short_dir)
    try:
        start = time.time()
        r = run_client([PROGRAM, IMAGE], server, env_extra={"RGPU_CONNECT_TIMEOUT": "30"}, timeout=60)
        assert r.returncode != 0
        assert time.time() - start < 10
        assert "speaks only TLS" in r.stderr and "tls://" in r.stderr, r.stderr
        assert "did not begin with TLS" in server.text()
    finally:
        server.stop()


def test_a_tls_client_at_a_plaintext_server_is_told_to_drop_tls_quickly(server):
    start = time.time()
    r = run_client([PROGRAM, IMAGE], "tls://" + server.addr,
                   env_extra={"RGPU_TLS_FINGERPRINT": "sha256:" + "0" * 64, "RGPU_CONNECT_TIMEOUT": "30"}, timeout=60)
    assert r.returncode != 0
    assert time.time() - start < 10
    assert "this server does not speak TLS; use host:port without tls://" in r.stderr, r.stderr
    assert "asked for TLS" in server.text()


def test_a_tls_server_drops_hostile_openings_and_serves_on(short_dir):
    import socket
    import struct
    server = tls_server(short_dir)
    try:
        openings = [
            struct.pack("<I", 0x54504752) + b"\x07" + bytes(19),                 # a preamble of an unknown kind
            struct.pack("<I", 0x54504752) + bytes(20) + b"\x16\x03\x01" + bytes(200),  # a broken ClientHello
            struct.pack("<I", 0x54504752) + bytes(3),                          # a preamble cut short
        ]
        for data in openings:
            with socket.create_connection(("127.0.0.1", server.port), timeout=15) as s:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                s.settimeout(15)
                try:
                    while s.recv(4096):
                        pass
                except ConnectionResetError:
                    pass
        r = run_client([PROGRAM, IMAGE], "tls://" + server.addr, env_extra={"RGPU_TLS_FINGERPRINT": fingerprint(server)})
        assert r.returncode == 0, r.stdout + r.stderr
        log = server.text()
        assert "malformed or incomplete TLS preamble" in log and "TLS handshake failed" in log, log
    finally:
        server.stop()


def test_client_certificates_are_required_with_tls_client_ca(short_dir):
    client_ca = make_ca(short_dir, "clientca")
    client_cert, client_key = make_signed(short_dir, "client", client_ca, "DNS:client")
    server = tls_server(short_dir, "--tls-client-ca", client_ca[0])
    try:
        fp = fingerprint(server)
        pin = {"RGPU_TLS_FINGERPRINT": fp, "RGPU_CONNECT_TIMEOUT": "30"}
        start = time.time()
        r = run_client([PROGRAM, IMAGE], "tls://" + server.addr, env_extra=pin, timeout=60)
        assert r.returncode != 0
        assert time.time() - start < 10
        assert "refused this client's TLS certificate" in r.stderr and "RGPU_TLS_CERT" in r.stderr, r.stderr
        r = run_client([PROGRAM, IMAGE], "tls://" + server.addr,
                       env_extra={**pin, "RGPU_TLS_CERT": client_cert, "RGPU_TLS_KEY": client_key})
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        server.stop()


def test_a_session_over_tls_resumes_through_cuts(short_dir):
    # The fault proxy cuts TCP under TLS: each resume sends a TlsPreamble naming the session, the
    # listener hands the raw socket to the session's process, which runs the TLS handshake.
    server = tls_server(short_dir)
    proxy = FaultProxy(BUILD / "bin/rgpu-faultproxy", server.addr, "--fault", "cut", "--after-bytes", "20000",
                       "--after-bytes-max", "300000", "--connections", "4", "--seed", "5")
    try:
        r = run_client([RECONNECT, IMAGE, "10"], "tls://" + proxy.addr,
                       env_extra={"RGPU_TLS_FINGERPRINT": fingerprint(server)}, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "rounds 10" in r.stdout
        assert "reconnecting" in r.stderr, r.stderr
        log = server.text()
        assert "TLS connection from" in log and "resumes session" in log, log
        assert "resumed from" in log, log
    finally:
        proxy.stop()
        server.stop()


def test_a_public_listen_needs_tls_and_a_token_unless_insecure(short_dir):
    port = free_port()
    base = [str(BUILD / "bin/rgpu-server"), "--listen", f"0.0.0.0:{port}", "--driver", "fake"]
    token_file = f"{short_dir}/token"
    open(token_file, "w").write("t0ken\n")
    env = {"PATH": "/usr/bin:/bin"}
    r = subprocess.run(base + ["--token-file", token_file], capture_output=True, text=True, timeout=10, env=env)
    assert r.returncode == 2
    assert "without TLS" in r.stderr and "--tls auto" in r.stderr and "--insecure" in r.stderr, r.stderr
    r = subprocess.run(base + ["--tls", "auto", "--state-dir", short_dir], capture_output=True, text=True, timeout=10,
                       env=env)
    assert r.returncode == 2
    assert "without a token" in r.stderr, r.stderr


# The round trips a process's connect costs, measured: the time from loading the shim to a first
# answered call through rgpu-delay-proxy at a 100 ms round trip, over plain TCP and over TLS, with
# and without a token. (The proxy accepts at once and delays data only, so TCP's own round trip
# does not show: expected plain 1 RTT (Hello) or 2 (with a token), TLS one more.)
CONNECT_SCRIPT = """import ctypes, os, sys, time
t = time.monotonic()  # before the load: the shim may begin connecting as it loads
cu = ctypes.CDLL(os.environ["SHIM"])
assert cu.cuInit(0) == 0
n = ctypes.c_int()
assert cu.cuDeviceGetCount(ctypes.byref(n)) == 0
print("connect_s %.4f" % (time.monotonic() - t))
"""


def connect_seconds(target, tmp_path, env):
    script = tmp_path / "connect.py"
    script.write_text(CONNECT_SCRIPT)
    best = None
    for _ in range(3):
        r = run_client(["python3", str(script)], target, env_extra={"SHIM": str(BUILD / "lib/libcuda.so.1"), **env})
        assert r.returncode == 0, r.stdout + r.stderr
        s = float(r.stdout.split("connect_s ")[1])
        best = s if best is None else min(best, s)
    return best


@pytest.mark.parametrize("token", [None, "s3cret"])
def test_tls_adds_at_most_two_round_trips_to_a_connect(short_dir, tmp_path, token):
    rtt = float(os.environ.get("RGPU_TEST_RTT", "0.2"))  # CPU noise stays a small part of one
    plain = Server(token=token, extra_args=["--runtime-dir", short_dir])
    secure = tls_server(short_dir, token=token)
    proxies = []
    try:
        for s in (plain, secure):
            port = free_port()
            p = subprocess.Popen([str(BUILD / "bin/rgpu-delay-proxy"), "--listen", f"127.0.0.1:{port}", "--target",
                                  s.addr, "--delay-ms", str(rtt * 1000)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            proxies.append(p)
            assert wait_for_port(port)
            s.via = f"127.0.0.1:{port}"
        env = {"RGPU_TOKEN": token} if token else {}
        t_plain = connect_seconds(plain.via, tmp_path, env)
        t_tls = connect_seconds("tls://" + secure.via, tmp_path, {**env, "RGPU_TLS_FINGERPRINT": fingerprint(secure)})
        print(f"connect at {rtt * 1000:.0f} ms RTT, token {bool(token)}: plain {t_plain / rtt:.2f} RTT, "
              f"TLS {t_tls / rtt:.2f} RTT")
        # TLS 1.3 adds its one round trip (measured 1.0 to 1.1 on loopback; the bound is 2).
        assert (t_tls - t_plain) / rtt < 1.75, (t_plain, t_tls)
    finally:
        for p in proxies:
            p.terminate()
            p.wait(5)
        plain.stop()
        secure.stop()


def test_a_restarted_tls_server_hands_the_reconnecting_client_its_session(short_dir, tmp_path):
    # As test_reconnect's restart, over TLS: the first server dies (kill -9), a second listens on the
    # same port with the same --state-dir (so the same certificate), and the client's resume,
    # which can reach only the second, is handed to the session process the first one left; that
    # process runs the TLS handshake with the context it has had since its start.
    import os
    import signal
    port = free_port()
    first = Server(port=port, extra_args=["--tls", "auto", "--state-dir", short_dir, "--runtime-dir", short_dir])
    fp = fingerprint(first)
    proxy = FaultProxy(BUILD / "bin/rgpu-faultproxy", first.addr, "--fault", "cut", "--on-signal", "--connections", "2")
    env = dict(os.environ, LD_LIBRARY_PATH=str(BUILD / "lib"), RGPU_SERVER="tls://" + proxy.addr,
               RGPU_TLS_FINGERPRINT=fp)
    go = tmp_path / "go"
    client = subprocess.Popen([RECONNECT, IMAGE, "10", str(go)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    second = None
    try:
        deadline = time.time() + 20
        while "started" not in first.text() and time.time() < deadline:
            time.sleep(0.05)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(5)
        second = restart_on_port(port, ["--tls", "auto", "--state-dir", short_dir, "--runtime-dir", short_dir])
        assert fingerprint(second) == fp
        proxy.strike()
        go.touch()
        out, err = client.communicate(timeout=120)
        assert client.returncode == 0, out + err
        assert "rounds 10" in out
        assert "reconnecting" in err, err
        assert "TLS connection from" in second.text() and "resumes session" in second.text(), second.text()
    finally:
        if client.poll() is None:
            client.kill()
        proxy.stop()
        first.log.close()
        if second:
            second.stop()
