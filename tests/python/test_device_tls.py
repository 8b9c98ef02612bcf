"""The PyTorch device over TLS 1.3 (issue 17): the quick start against rgpu-opserver --tls auto with
RGPU_OPSERVER=tls://... and the pinned fingerprint the server printed; an untrusted certificate,
and a plaintext client at a TLS server and the reverse, each refused quickly with what to do; and
a session over TLS that resumes through rgpu-faultproxy's cuts. Each runs in a fresh Python."""
import re
import shutil
import tempfile
import time

import pytest

from device_fixtures import BUILD, OpServer, opserver, run_python, use_opserver  # noqa: F401  (fixtures)
from fault_proxy import FaultProxy

QUICK_START = 'import torch, rgpu; x = torch.ones(4, device="rgpu"); print((x*2).sum().item())'


@pytest.fixture(scope="module")
def tls_opserver():
    d = tempfile.mkdtemp(prefix="rgpu-tls-")
    s = OpServer(extra_args=["--tls", "auto", "--state-dir", d, "--runtime-dir", d])
    deadline = time.time() + 10
    while time.time() < deadline and "fingerprint sha256:" not in s.log_path.read_text():
        time.sleep(0.05)
    s.fingerprint = re.search(r"fingerprint (sha256:[0-9a-f]{64})", s.log_path.read_text()).group(1)
    yield s
    s.stop()
    shutil.rmtree(d, ignore_errors=True)


def test_quick_start_over_tls_with_the_pinned_fingerprint(tls_opserver):
    r = run_python(QUICK_START, {"RGPU_OPSERVER": "tls://" + tls_opserver.addr,
                                 "RGPU_TLS_FINGERPRINT": tls_opserver.fingerprint})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "8.0"


def test_an_untrusted_certificate_is_refused_with_how_to_pin_it(tls_opserver):
    start = time.time()
    r = run_python(QUICK_START, {"RGPU_OPSERVER": "tls://" + tls_opserver.addr, "RGPU_CONNECT_TIMEOUT": "120"})
    assert r.returncode != 0
    assert time.time() - start < 60  # not retried until the connect timeout (room for torch's import)
    assert f"set RGPU_TLS_FINGERPRINT={tls_opserver.fingerprint} to trust it" in r.stderr, r.stderr


def test_a_plaintext_client_at_a_tls_opserver_is_told_to_use_tls(tls_opserver):
    r = run_python(QUICK_START, {"RGPU_OPSERVER": tls_opserver.addr, "RGPU_CONNECT_TIMEOUT": "30"})
    assert r.returncode != 0
    assert "speaks only TLS" in r.stderr and "tls://" in r.stderr, r.stderr


def test_a_tls_client_at_a_plaintext_opserver_is_told_to_drop_tls(opserver):
    r = run_python(QUICK_START, {"RGPU_OPSERVER": "tls://" + opserver.addr, "RGPU_CONNECT_TIMEOUT": "30",
                                 "RGPU_TLS_FINGERPRINT": "sha256:" + "0" * 64})
    assert r.returncode != 0
    assert "does not speak TLS; use host:port without tls://" in r.stderr, r.stderr


def test_a_session_over_tls_resumes_through_cuts(tls_opserver):
    proxy = FaultProxy(BUILD / "bin" / "rgpu-faultproxy", tls_opserver.addr, "--fault", "cut", "--after-bytes",
                       "20000", "--after-bytes-max", "1500000", "--connections", "3", "--seed", "11")
    code = ("import torch, rgpu\n"
            "x = torch.arange(200000, dtype=torch.int64).to('rgpu')\n"
            "t = 0\n"
            "for i in range(30):\n"
            "    t += (x * i).sum().item() + int((x + i).cpu()[-1])\n"
            "print(t)\n")
    try:
        r = run_python(code, {"RGPU_OPSERVER": "tls://" + proxy.addr, "RGPU_TLS_FINGERPRINT": tls_opserver.fingerprint},
                       timeout=180)
    finally:
        proxy.stop()
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip()) == sum(sum(range(200000)) * i + 199999 + i for i in range(30))
    assert "reconnecting" in r.stderr, r.stderr
    log = tls_opserver.log_path.read_text()
    assert "resumed from" in log, log
