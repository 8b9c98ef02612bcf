"""Golden and behaviour tests of codegen/generate_nvml.py.

The golden test runs the generator on mini_nvml.h + mini_annotations.txt + mini_op_ids.txt and
compares every output with golden/. After an intended change: UPDATE_GOLDEN=1 python3 -m pytest
codegen/tests_nvml, then review the diff of golden/ like code.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
GEN = ROOT / "codegen" / "generate_nvml.py"
GOLDEN = HERE / "golden"


def run(*args):
    return subprocess.run([sys.executable, str(GEN), *map(str, args)], capture_output=True, text=True)


def run_mini(tmp: Path, annotations: Path = HERE / "mini_annotations.txt", check=False):
    ops = tmp / "op_ids.txt"
    if not ops.exists():
        shutil.copy(HERE / "mini_op_ids.txt", ops)
    out = tmp / "out"
    extra = ["--check"] if check else []
    return run("--header", HERE / "mini_nvml.h", "--annotations", annotations, "--op-ids", ops, "--out", out,
               *extra), out, ops


def coverage(out: Path) -> dict:
    lines = [l for l in (out / "nvml_coverage.txt").read_text().splitlines() if l and not l.startswith("#")]
    return {l.split()[1]: l for l in lines}


def test_mini_outputs_match_golden(tmp_path):
    r, out, ops = run_mini(tmp_path)
    assert r.returncode == 0, r.stderr
    produced = {p.name: p.read_text() for p in sorted(out.iterdir())}
    produced["op_ids.txt"] = ops.read_text()
    if os.environ.get("UPDATE_GOLDEN"):
        shutil.rmtree(GOLDEN, ignore_errors=True)
        GOLDEN.mkdir()
        for name, text in produced.items():
            (GOLDEN / name).write_text(text)
    expected = {p.name: p.read_text() for p in sorted(GOLDEN.iterdir())}
    assert sorted(produced) == sorted(expected)
    for name in expected:
        assert produced[name] == expected[name], f"{name} differs from golden (UPDATE_GOLDEN=1 to accept)"


def test_op_ids_are_append_only_from_8192(tmp_path):
    r, out, ops = run_mini(tmp_path)
    assert r.returncode == 0, r.stderr
    names = [l for l in ops.read_text().splitlines() if l and not l.startswith("#")]
    assert names[:2] == ["obsolete_nvmlDeviceGetOld", "nvmlDeviceGetName"]  # kept in place
    ops_h = (out / "nvml_ops.gen.h").read_text()
    assert "nvmlDeviceGetName = 8193;" in ops_h
    assert "obsolete" not in ops_h


def test_rules_and_refusals(tmp_path):
    r, out, _ = run_mini(tmp_path)
    assert r.returncode == 0, r.stderr
    cov = coverage(out)
    for name in ["nvmlDeviceGetName", "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetFieldValues",
                 "nvmlDeviceGetTopologyNearestGpus", "nvmlDeviceGetEncoderStats", "nvmlSystemGetTopologyGpuSet",
                 "nvmlDeviceGetMemoryInfo_v2"]:
        assert cov[name].startswith("generated"), cov[name]
    assert cov["nvmlErrorString"].startswith("local")
    refused = {
        "nvmlDeviceGetRetiredPages_v2": "may be an array",
        "nvmlDeviceGetWithPointer": "holds pointers or handles",
        "nvmlDeviceGetOpaque": "void *",
        "nvmlDeviceGetBareString": "no length parameter",
        "nvmlDeviceSetPersistenceMode": "changes the server GPU",
    }
    for name, why in refused.items():
        assert cov[name].startswith("unsupported") and why in cov[name], cov[name]
    stubs = (out / "nvml_client_stubs.gen.cpp").read_text()
    assert 'nvmlDeviceGetOpaque(nvmlDevice_t device, void *data) { return unsupported("nvmlDeviceGetOpaque"); }' in stubs
    # wrap: the marshaller is emitted under another name; the exported entry is hand-written.
    assert "nvmlReturn_t rgpu_nvml_fwd_nvmlInit_v2(void)" in stubs
    assert "RGPU_NVML_API nvmlReturn_t nvmlInit_v2" not in stubs


def test_check_reports_stale_output(tmp_path):
    r, out, _ = run_mini(tmp_path)
    assert r.returncode == 0
    assert run_mini(tmp_path, check=True)[0].returncode == 0
    (out / "nvml_coverage.txt").write_text("stale\n")
    r = run_mini(tmp_path, check=True)[0]
    assert r.returncode == 1 and "stale" in r.stderr


def test_unknown_annotation_key_fails_loudly(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("nvmlDeviceGetName oneway\n")
    r, _, _ = run_mini(tmp_path, annotations=bad)
    assert r.returncode == 2 and "unknown key" in r.stderr


def test_checked_in_gen_is_fresh():
    """gen/nvml_* matches nvml.h (when the header is installed) and the annotations."""
    r = run("--check")
    if r.returncode == 2 and "cannot find nvml.h" in r.stderr:
        import pytest
        pytest.skip("nvml.h is not installed here (scripts/setup.sh installs it)")
    assert r.returncode == 0, r.stderr
