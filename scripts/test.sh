#!/usr/bin/env bash
# Builds rgpu and runs every test that needs no GPU: unit tests, the code generator's golden
# tests and freshness check, the fuzz smoke runs, and the end-to-end tests through the shim,
# rgpu-server and the fake driver. The GPU tests are tests/gpu/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# PyTorch for the torch tests (.venv/); without it those tests skip and say why.
scripts/setup_torch.sh >/dev/null || echo "test: warning: could not install torch; the PyTorch tests will skip" >&2
python3 codegen/generate.py --check
python3 codegen/generate_nvml.py --check
cd build
ctest --output-on-failure -j2 "$@"
