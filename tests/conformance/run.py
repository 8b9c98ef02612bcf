#!/usr/bin/env python3
"""Runs rgpu_conformance on two drivers and diffs their answers (tests/conformance/README.md).

  run.py fake --build B --image F --out D     the fake against h200.txt (the real driver's answers,
                                              recorded), less the keys known_fake.txt allows
  run.py real --build B --image F --out D [--cuda LIB] [--nvml LIB]
                                              the real driver (default /usr/local/nvidia/lib64, or
                                              RGPU_REAL_DRIVER) against the fake, same allowances,
                                              and (a report) through rgpu on the real driver
                                              against it directly; exit 77 (skipped) when no real
                                              driver is found and none was named; through rgpu
                                              against the real driver directly, less the keys
                                              known_rgpu.txt allows, fails too
  run.py rgpu --build B --image F --out D     through the shim and rgpu-server on the fake, against
                                              the fake directly, less the keys known_rgpu.txt
                                              allows (where the shim answers otherwise by design,
                                              each with its reason)
  run.py diff A B [--allow FILE]              the differences of two outputs

Each output line is `key = answer` or `key: answer`; lines are matched by key (a key met twice gets
`#2`), so one difference is one line of the report. Writes D/<driver>.txt and D/<a>_vs_<b>.diff;
exits 1 when a difference is not allowed.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "h200.txt"
KNOWN_FAKE = HERE / "known_fake.txt"
# Where the shim may answer otherwise than the driver under it (a one-way call whose error the
# client cannot know comes with the next call that waits, ...): rgpu_fake and rgpu_real alike.
KNOWN_RGPU = HERE / "known_rgpu.txt"
DEFAULT_REAL = "/usr/local/nvidia/lib64/libcuda.so.1"


def parse(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue  # a recording's header (h200.txt)
        for sep in (" = ", ": "):
            if sep in line:
                key, value = line.split(sep, 1)
                break
        else:
            key, value = line, ""
        k, n = key, 1
        while k in out:
            n += 1
            k = f"{key}#{n}"
        out[k] = value
    return out


def allowed(path: Path | None) -> dict[str, str]:
    """key -> reason, from lines `key  # reason` (a key ending in * allows every key it starts)."""
    rules: dict[str, str] = {}
    if path and path.exists():
        for line in path.read_text().splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            key, _, reason = line.partition("  #")
            rules[key.strip()] = reason.strip()
    return rules


def is_allowed(key: str, rules: dict[str, str]) -> bool:
    return any(key == r or (r.endswith("*") and key.startswith(r[:-1])) for r in rules)


def diff(a_name: str, a: str, b_name: str, b: str, rules: dict[str, str]) -> tuple[list[str], list[str]]:
    """(differences not allowed, allowed ones), each line `key: A | B`."""
    da, db = parse(a), parse(b)
    bad, ok = [], []
    keys = list(da) + [k for k in db if k not in da]
    for k in keys:
        va, vb = da.get(k, "(missing)"), db.get(k, "(missing)")
        if va == vb:
            continue
        line = f"{k}:\n    {a_name}: {va}\n    {b_name}: {vb}"
        # A probe newer than the reference (h200.txt) is not recorded yet: no verdict on it.
        unrecorded = a_name == "h200" and va == "(missing)"
        (ok if unrecorded or is_allowed(k, rules) else bad).append(line)
    return bad, ok


def report(out: Path, a_name: str, a: str, b_name: str, b: str, allow: Path | None) -> int:
    bad, ok = diff(a_name, a, b_name, b, allowed(allow))
    text = [f"# {a_name} vs {b_name}: {len(bad)} differences not allowed, {len(ok)} allowed"
            + (f" by {allow.name}" if allow else "")]
    text += bad
    if ok:
        text.append(f"\n# allowed ({allow.name if allow else ''}):")
        text += ok
    path = out / f"{a_name}_vs_{b_name}.diff"
    path.write_text("\n".join(text) + "\n")
    print(text[0] + f" (full report: {path})")
    for line in bad[:60]:
        print(line)
    if len(bad) > 60:
        print(f"... {len(bad) - 60} more in {path}")
    return 1 if bad else 0


SECTIONS = ["init", "device", "context", "memory", "functions", "streams", "launches", "vmm", "graphs", "thread",
            "nvml"]


def run_section(build: Path, image: str, cuda: str, nvml: str | None, section: str, env: dict) -> tuple[int, str]:
    args = [str(build / "bin/rgpu_conformance"), "--cuda", cuda, "--image", image, "--section", section]
    if nvml:
        args += ["--nvml", nvml]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    return r.returncode, r.stdout


def crashed(text: str) -> set[str]:
    """The sections an output reports as crashed (`section NAME = crashed (...)`)."""
    return {line.split(" = ", 1)[0][len("section "):] for line in text.splitlines()
            if line.startswith("section ") and " = crashed" in line}


def run(build: Path, image: str, cuda: str, nvml: str | None, env: dict | None = None,
        skip: set[str] | None = None) -> str:
    """Every section in a process of its own (a crash of the driver under test costs one section:
    it is reported as the line `section NAME = crashed (...)`), then the NULL-pointer probes, one
    process each. Sections in skip are not run: those the reference driver crashed in, where it
    gave no answers to compare with (otherwise every later repeated key, such as `ctx synchronize
    at end#N`, would be numbered one section off)."""
    e = dict(os.environ)
    e.update(env or {})
    out = []
    sections = SECTIONS + [f"null:{i}" for i in range(100)]
    for section in sections:
        if section == "nvml" and not nvml:
            continue
        if skip and section in skip:
            continue
        rc, text = run_section(build, image, cuda, nvml, section, e)
        if rc == 3 and section.startswith("null:"):
            break  # past the last probe
        lines = text.splitlines()
        if lines and lines[-1] == "end":
            lines.pop()
        out += lines
        if rc != 0:
            how = f"signal {-rc}" if rc < 0 else f"exit {rc}"
            out.append(f"section {section} = crashed ({how})")
            sys.stderr.write(f"rgpu_conformance on {cuda}: section {section} ended with {how} after "
                             f"{len(lines)} lines\n")
    if not out:
        raise SystemExit(f"rgpu_conformance printed nothing on {cuda}")
    return "\n".join(out) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def through_rgpu(build: Path, image: str, driver: str, nvml: str | None, out: Path) -> str:
    """The program through the shim (build/lib) and an rgpu-server on driver."""
    port = free_port()
    args = [str(build / "bin/rgpu-server"), "--listen", f"127.0.0.1:{port}", "--driver", driver, "--cache-dir", "none"]
    if nvml and driver != "fake":
        args += ["--nvml", nvml]
    log = open(out / f"server_{'fake' if driver == 'fake' else 'real'}.log", "w")
    env = dict(os.environ)
    env.pop("RGPU_TOKEN", None)
    server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.time() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise SystemExit(f"rgpu-server did not start; see {log.name}")
                time.sleep(0.05)
        with tempfile.TemporaryDirectory() as tmp:
            lib = build / "lib"
            return run(build, image, str(lib / "libcuda.so.1"), str(lib / "libnvidia-ml.so.1"),
                       {"RGPU_SERVER": f"127.0.0.1:{port}", "LD_LIBRARY_PATH": str(lib),
                        "RGPU_ANSWER_CACHE": f"{tmp}/answers.txt", "RGPU_NVRTC_CACHE": f"{tmp}/nvrtc"})
    finally:
        server.terminate()
        try:
            server.wait(5)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["fake", "real", "rgpu", "diff"])
    ap.add_argument("files", nargs="*", help="diff: the two outputs")
    ap.add_argument("--build", type=Path, default=Path("build"))
    ap.add_argument("--image", default="build/tests/kernels/test_kernels.fatbin")
    ap.add_argument("--out", type=Path, default=Path("build/conformance"))
    ap.add_argument("--cuda", help="real: the real libcuda.so.1")
    ap.add_argument("--nvml", help="real: the real libnvidia-ml.so.1")
    ap.add_argument("--allow", type=Path)
    a = ap.parse_args()
    if a.mode == "diff":
        if len(a.files) != 2:
            ap.error("diff takes two files")
        x, y = map(Path, a.files)
        a.out.mkdir(parents=True, exist_ok=True)
        return report(a.out, x.stem, x.read_text(), y.stem, y.read_text(), a.allow)
    a.out.mkdir(parents=True, exist_ok=True)
    build = a.build.resolve()
    fake_cuda, fake_nvml = str(build / "lib/libfakecuda.so"), str(build / "lib/libfakenvml.so")
    if a.mode == "fake":
        reference = REFERENCE.read_text() if REFERENCE.exists() else ""
        fake = run(build, a.image, fake_cuda, fake_nvml, skip=crashed(reference))
        (a.out / "fake.txt").write_text(fake)
        if not reference:
            print(f"no {REFERENCE.name} recorded yet: the fake ran through every call (nothing to diff)")
            return 0
        return report(a.out, "h200", reference, "fake", fake, KNOWN_FAKE)
    if a.mode == "rgpu":
        fake = run(build, a.image, fake_cuda, fake_nvml)
        (a.out / "fake.txt").write_text(fake)
        shim = through_rgpu(build, a.image, "fake", None, a.out)
        (a.out / "rgpu_fake.txt").write_text(shim)
        return report(a.out, "fake", fake, "rgpu_fake", shim, KNOWN_RGPU)
    # real
    cuda = a.cuda or os.environ.get("RGPU_REAL_DRIVER") or DEFAULT_REAL
    if not Path(cuda).exists():
        if a.cuda or os.environ.get("RGPU_REAL_DRIVER"):
            raise SystemExit(f"no real driver at {cuda}")
        print(f"no real driver at {cuda} (set RGPU_REAL_DRIVER): skipped")
        return 77
    nvml = a.nvml or str(Path(cuda).parent / "libnvidia-ml.so.1")
    real = run(build, a.image, cuda, nvml)
    (a.out / "real.txt").write_text(real)
    fake = run(build, a.image, fake_cuda, fake_nvml, skip=crashed(real))
    (a.out / "fake.txt").write_text(fake)
    status = report(a.out, "real", real, "fake", fake, KNOWN_FAKE)
    if REFERENCE.exists():
        # Not a failure: says when h200.txt should be recorded again (another driver, new calls).
        report(a.out, "h200", REFERENCE.read_text(), "real", real, None)
    shim = through_rgpu(build, a.image, cuda, nvml, a.out)
    (a.out / "rgpu_real.txt").write_text(shim)
    return max(status, report(a.out, "real", real, "rgpu_real", shim, KNOWN_RGPU))


if __name__ == "__main__":
    sys.exit(main())
