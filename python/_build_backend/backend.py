"""setuptools' build backend, plus one thing: the rgpu extension must be compiled against the torch
installed in the environment pip installs into (the one that will import it), and pip's build
isolation hides that environment. Before building, this asks the same interpreter, outside the
isolation, where its torch is, and puts that directory at the end of sys.path."""
import os
import subprocess
import sys

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the PEP 517 hooks)


def _expose_installed_torch():
    try:
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
    r = subprocess.run([sys.executable, "-c", "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))"],
                       env=env, capture_output=True, text=True)
    if r.returncode == 0 and r.stdout.strip():
        sys.path.append(r.stdout.strip())


# Every hook runs setup.py (which imports torch), so expose it as the backend loads.
_expose_installed_torch()
