#!/usr/bin/env bash
# Builds rgpu and runs every test that needs no GPU: unit tests, the code generator's golden
# tests and freshness check, the fuzz smoke runs, and the end-to-end tests through the shim,
# rgpu-server and the fake driver. The GPU tests are tests/gpu/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
# With PyTorch (.venv/, scripts/setup_torch.sh) for the PyTorch tests, and MkDocs and Chromium for
# the docs site's (tests/docs/); without them they skip and say why.
RGPU_SETUP_TORCH=1 RGPU_SETUP_DOCS=1 scripts/setup.sh
python3 codegen/generate.py --check
python3 codegen/generate_nvml.py --check
cd build
ctest --output-on-failure -j2 "$@"
