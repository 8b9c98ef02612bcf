"""ctest program_versions: every rgpu program's --version prints "<program> <version>" with the one
version of the file VERSION, and so does the Python package (rgpu.__version__).

    python3 tests/check_versions.py VERSION PROGRAM...

PROGRAM is the path of a built program, or of a .py script (python/rgpu/run.py, which is
rgpu-run) run with this Python. The package is imported from the python/ folder beside this
file's tests/. Exits 1, listing each program that disagrees.
"""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT_NAMES = {"run.py": "rgpu-run"}


def main(version, programs):
    wrong = []
    for program in programs:
        base = os.path.basename(program)
        name = SCRIPT_NAMES.get(base, base)
        command = [sys.executable, program] if program.endswith(".py") else [program]
        r = subprocess.run(command + ["--version"], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        if (r.returncode, r.stdout) != (0, f"{name} {version}\n"):
            wrong.append(f"{name}: exited {r.returncode}, printed {r.stdout!r} {r.stderr.strip()!r}")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, "-c", "import rgpu; print(rgpu.__version__)"], capture_output=True,
                       text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    if r.stdout != f"{version}\n":
        wrong.append(f"rgpu.__version__: {r.stdout.strip()!r} {r.stderr.strip()[-500:]!r}")
    for line in wrong:
        print(f"expected version {version}, but {line}")
    print(f"{len(programs) + 1 - len(wrong)} of {len(programs) + 1} print version {version}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
