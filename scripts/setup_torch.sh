#!/usr/bin/env bash
# Installs PyTorch (the stock CUDA build from PyPI, the version the GPU machine runs) into .venv/,
# for the PyTorch tests: torch through the driver shim (tests/e2e/test_torch.py) and the rgpu
# device (tests/python/). Safe to run again: it installs only what is missing.
#   RGPU_TORCH_VERSION   the torch version (default 2.11.0, as on the H200 test machine)
# Prints the venv's python on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${RGPU_TORCH_VERSION:-2.11.0}
venv=.venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || {
    echo "setup_torch: cannot create a venv (python3 -m venv); install python3-venv" >&2
    exit 1
  }
fi
if ! "$venv/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$version'))" 2>/dev/null; then
  echo "setup_torch: installing torch==$version into $venv (about 4.5 GB with its CUDA libraries)" >&2
  "$venv/bin/pip" install -q "torch==$version" numpy pytest expecttest >&2
fi
"$venv/bin/python" -c "import pytest, numpy, expecttest" 2>/dev/null || "$venv/bin/pip" install -q numpy pytest expecttest >&2
echo "$PWD/$venv/bin/python"
