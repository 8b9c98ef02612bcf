"""Several rgpu devices (issue 14, item 6): every device the opserver presents is rgpu:i
(rgpu-opserver --devices 2 on the cpu here; on cuda, the GPUs of the host). Each test runs in a
fresh Python against a server of its own that presents two devices, since the device count is
the connection's (asked once, in the hello)."""
import pytest
from device_fixtures import ON_CUDA, OpServer, free_port, opserver, run_python, two_devices  # noqa: F401

PRELUDE = """
import torch, rgpu
def raises(fn, text):
    try:
        fn()
    except Exception as e:
        assert text in str(e), f"expected {text!r} in: {e}"
        return str(e)
    raise AssertionError(f"no error; expected one with {text!r}")
"""


def run(server, body):
    p = run_python(PRELUDE + body, env_extra={"RGPU_OPSERVER": server.addr})
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr[-4000:]}"
    return p.stdout


def test_device_count_and_tensors_on_each(two_devices):
    out = run(two_devices, """
assert torch.rgpu.device_count() == 2, torch.rgpu.device_count()
assert torch.accelerator.device_count() == 2
a = torch.arange(6.0, device="rgpu:0")
b = torch.arange(6.0, device="rgpu:1")
assert a.device == torch.device("rgpu:0") and b.device == torch.device("rgpu:1")
# ops on each device stay there, and compute
c = (b * 2 + 1).sum()
assert c.device == torch.device("rgpu:1"), c.device
assert c.item() == 36.0
d = torch.randn(3, 4, device="rgpu:1") @ torch.ones(4, 2, device="rgpu:1")
assert d.device.index == 1 and d.shape == (3, 2)
# factories that come back from the server, and views
idx = torch.tril_indices(3, 3, device="rgpu:1")
assert idx.device.index == 1 and idx.cpu().shape == (2, 6)
assert b[2:].device.index == 1 and b.view(2, 3).t().device.index == 1
nz = torch.nonzero(b > 2)
assert nz.device.index == 1 and nz.cpu().view(-1).tolist() == [3, 4, 5]
print("ok")
""")
    assert "ok" in out


def test_a_device_past_the_count_is_refused(two_devices):
    run(two_devices, """
msg = raises(lambda: torch.zeros(2, device="rgpu:2"), "rgpu:2 does not exist")
assert "presents 2 devices" in msg, msg
raises(lambda: torch.rgpu.set_device(5), "rgpu:5 does not exist")
assert torch.rgpu.current_device() == 0
""")


def test_copies_between_devices(two_devices):
    run(two_devices, """
x = torch.randn(4, 5)
a = x.to("rgpu:0")
b = a.to("rgpu:1")
assert b.device == torch.device("rgpu:1")
assert torch.equal(b.cpu(), x)
# the copy is made on the server: no bytes come back to the client on the way
rgpu.synchronize()
before = rgpu.stats()["waits_by_reason"].get("read", 0)
c = b.to("rgpu:0")
d = torch.empty(4, 5, device="rgpu:1").copy_(c.t().contiguous().t())
rgpu.synchronize()
assert rgpu.stats()["waits_by_reason"].get("read", 0) == before
assert torch.equal(d.cpu(), x) and d.device.index == 1
# non-contiguous source, dtype change across devices
e = a.t().to("rgpu:1", torch.float64)
assert e.device.index == 1 and e.dtype == torch.float64 and torch.equal(e.cpu(), x.t().double())
# a module moved from one device to the other
m = torch.nn.Linear(5, 3).to("rgpu:1")
assert all(p.device.index == 1 for p in m.parameters())
m.to("rgpu:0")
assert all(p.device.index == 0 for p in m.parameters())
""")


def test_an_op_mixing_devices_raises_torchs_error(two_devices):
    run(two_devices, """
a = torch.ones(3, device="rgpu:0")
b = torch.ones(3, device="rgpu:1")
raises(lambda: a + b, "Expected all tensors to be on the same device, but found at least two devices, rgpu:0 and rgpu:1")
raises(lambda: b.add_(a), "Expected all tensors to be on the same device")
raises(lambda: torch.cat([a, b]), "Expected all tensors to be on the same device")
# the connection is still good afterwards
assert (a + a).sum().item() == 6.0 and (b * 3).sum().item() == 9.0
""")


def test_guards_and_the_current_device(two_devices):
    run(two_devices, """
import threading
assert torch.rgpu.current_device() == 0
with torch.rgpu.device(1):
    assert torch.rgpu.current_device() == 1
    t = torch.zeros(2, device="rgpu")   # "rgpu" is the current device
    assert t.device.index == 1
    u = torch.empty(2, device="rgpu").fill_(3)
    assert u.device.index == 1
    with torch.rgpu.device(0):
        assert torch.zeros(1, device="rgpu").device.index == 0
    assert torch.rgpu.current_device() == 1
assert torch.rgpu.current_device() == 0
# the guard restores the device after an error inside it
try:
    with torch.rgpu.device("rgpu:1"):
        raise KeyError("x")
except KeyError:
    pass
assert torch.rgpu.current_device() == 0
# set_device, and the per-thread current device (like cuda's)
torch.rgpu.set_device(1)
assert torch.zeros(1, device="rgpu").device.index == 1
seen = []
th = threading.Thread(target=lambda: seen.append(torch.rgpu.current_device()))
th.start(); th.join()
assert seen == [0], seen
torch.rgpu.set_device("rgpu:0")
# torch's own device guard (torch.accelerator / DeviceGuard) goes through rgpu's
with torch.accelerator.device_index(1):
    assert torch.rgpu.current_device() == 1
assert torch.rgpu.current_device() == 0
with torch.rgpu.device_of(torch.ones(1, device="rgpu:1")):
    assert torch.rgpu.current_device() == 1
""")


def test_training_on_the_second_device(two_devices):
    """A few SGD steps on rgpu:1 equal the same steps on the cpu (autograd runs the device's
    backward on its own thread, with that device current)."""
    run(two_devices, """
torch.manual_seed(0)
cpu = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
dev = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
dev.load_state_dict(cpu.state_dict())
dev.to("rgpu:1")
oc = torch.optim.SGD(cpu.parameters(), lr=0.1)
od = torch.optim.SGD(dev.parameters(), lr=0.1, foreach=True)
for _ in range(3):
    x, y = torch.randn(5, 4), torch.randn(5, 1)
    for m, o, d in ((cpu, oc, "cpu"), (dev, od, "rgpu:1")):
        o.zero_grad()
        torch.nn.functional.mse_loss(m(x.to(d)), y.to(d)).backward()
        o.step()
for p, q in zip(cpu.parameters(), dev.parameters()):
    assert q.device.index == 1 and q.grad.device.index == 1
    torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-6, atol=1e-6)
""")


@pytest.mark.skipif(ON_CUDA, reason="on cuda the shared server presents every GPU of the host")
def test_one_device_by_default(opserver):  # noqa: F811  (the shared server: no --devices)
    run(opserver, """
assert torch.rgpu.device_count() == 1
raises(lambda: torch.ones(1, device="rgpu:1"), "rgpu:1 does not exist")
""")


def test_no_devices_without_a_server():
    """device_count() is 0, with a warning that says why, when no opserver answers (as
    torch.cuda.device_count() without a driver); a tensor then raises the connect error."""
    p = run_python(PRELUDE + """
import warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    assert torch.rgpu.device_count() == 0
assert any("cannot reach rgpu-opserver" in str(x.message) for x in w), [str(x.message) for x in w]
raises(lambda: torch.ones(1, device="rgpu"), "cannot reach rgpu-opserver")
""", env_extra={"RGPU_OPSERVER": f"127.0.0.1:{free_port()}", "RGPU_CONNECT_TIMEOUT": "2"})
    assert p.returncode == 0, p.stderr[-3000:]


def test_a_model_split_over_two_devices_with_grad_scaler(two_devices):
    """Model parallel: one layer on rgpu:0, one on rgpu:1, activations copied between them,
    trained with GradScaler("rgpu") (one found_inf per device, the scale copied to each): equal
    to the same model on the cpu, the step with an inf gradient on rgpu:1 skipped on both."""
    run(two_devices, """
import copy
torch.manual_seed(0)
ref = torch.nn.ModuleList([torch.nn.Linear(4, 6), torch.nn.Linear(6, 2)])
split = copy.deepcopy(ref)
split[0].to("rgpu:0"); split[1].to("rgpu:1")
def fwd(m, x, devs):
    return m[1](torch.tanh(m[0](x.to(devs[0]))).to(devs[1]))
results = []
for m, devs, kind in ((ref, ("cpu", "cpu"), "cpu"), (split, ("rgpu:0", "rgpu:1"), "rgpu")):
    torch.manual_seed(1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(kind, init_scale=1024.0, growth_interval=1)
    scales = []
    for step in range(4):
        x, y = torch.randn(3, 4), torch.randn(3, 2)
        opt.zero_grad()
        scaler.scale(torch.nn.functional.mse_loss(fwd(m, x, devs), y.to(devs[1]))).backward()
        if step == 2:
            m[1].weight.grad.view(-1)[0] = float("inf")
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    results.append(scales)
assert results[0] == results[1] == [2048.0, 4096.0, 2048.0, 4096.0], results
assert split[0].weight.device.index == 0 and split[1].weight.device.index == 1
for p, q in zip(ref.parameters(), split.parameters()):
    torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-6, atol=1e-6)
""")
