"""Golden and behaviour tests of codegen/generate.py.

The golden test runs the generator on mini_cuda.h + mini_annotations.txt + mini_op_ids.txt and
compares every output with golden/. After an intended change: UPDATE_GOLDEN=1 python3 -m pytest
codegen/tests, then review the diff of golden/ like code.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
GEN = ROOT / "codegen" / "generate.py"
GOLDEN = HERE / "golden"
CUDA_H = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "cuda.h"


def run(*args, cwd=None):
    return subprocess.run([sys.executable, str(GEN), *map(str, args)], capture_output=True, text=True, cwd=cwd)


def run_mini(tmp: Path, annotations: Path = HERE / "mini_annotations.txt", header: Path = HERE / "mini_cuda.h"):
    ops = tmp / "op_ids.txt"
    if not ops.exists():
        shutil.copy(HERE / "mini_op_ids.txt", ops)
    out = tmp / "out"
    return run("--header", header, "--annotations", annotations, "--op-ids", ops, "--out", out), out, ops


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


def test_output_is_deterministic(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, out_a, _ = run_mini(tmp_path / "a")
    b, out_b, _ = run_mini(tmp_path / "b")
    assert a.returncode == b.returncode == 0
    for p in out_a.iterdir():
        assert p.read_text() == (out_b / p.name).read_text()


def test_op_ids_are_append_only(tmp_path):
    r, _, ops = run_mini(tmp_path)
    assert r.returncode == 0, r.stderr
    first = ops.read_text()
    assert first.startswith((HERE / "mini_op_ids.txt").read_text())  # old lines untouched
    r, _, ops = run_mini(tmp_path)  # a second run changes nothing
    assert ops.read_text() == first


def test_check_reports_stale_output(tmp_path):
    r, out, ops = run_mini(tmp_path)
    assert r.returncode == 0, r.stderr
    args = ["--header", HERE / "mini_cuda.h", "--annotations", HERE / "mini_annotations.txt",
            "--op-ids", ops, "--out", out, "--check"]
    assert run(*args).returncode == 0
    stub = out / "client_stubs.gen.cpp"
    stub.write_text(stub.read_text() + "// edited by hand\n")
    r = run(*args)
    assert r.returncode == 1
    assert "client_stubs.gen.cpp" in r.stderr


@pytest.mark.parametrize("line, message", [
    ("cuNoSuchCall local", "not declared by the header"),
    ("cuMemAlloc oneway", "oneway but has outputs"),
    ("cuMemAlloc mint=nope", "has no parameter"),
    ("cuMemAlloc mint=bytesize", "not a handle output"),
    ("cuBufferOut out=data:bytes*weird", "not a parameter"),
    ("cuBufferOut out=data:bytes-1", "cannot read size expression"),
    ("cuInit local oneway", "takes no other keys"),
    ("cuDenied unsupported", "say why"),
    ("cuInit frobnicate", "cannot read"),
])
def test_bad_annotations_fail_loudly(tmp_path, line, message):
    ann = tmp_path / "ann.txt"
    ann.write_text(line + "\n")
    r, _, _ = run_mini(tmp_path, annotations=ann)
    assert r.returncode == 2
    assert message in r.stderr


def test_unsorted_annotations_fail(tmp_path):
    ann = tmp_path / "ann.txt"
    ann.write_text("cuMemFree oneway\ncuInit local\n")
    r, _, _ = run_mini(tmp_path, annotations=ann)
    assert r.returncode == 2
    assert "out of order" in r.stderr


@pytest.mark.skipif(not CUDA_H.exists(), reason="no CUDA toolkit headers here")
def test_real_gen_is_up_to_date():
    r = run("--check")
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(not CUDA_H.exists() or shutil.which("g++") is None, reason="needs cuda.h and g++")
@pytest.mark.parametrize("source", ["client_stubs.gen.cpp", "server_dispatch.gen.cpp", "ops.gen.cpp",
                                    "driver_table.gen.cpp", "client_exports.gen.cpp"])
def test_real_gen_compiles_cleanly(source):
    cmd = ["g++", "-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
           "-D__CUDA_API_VERSION_INTERNAL", f"-I{ROOT}", f"-I{CUDA_H.parent}", str(ROOT / "gen" / source)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
