#!/usr/bin/env bash
# Builds the docs site with `mkdocs build --strict` (ctest docs_build): a page missing from the
# navigation, a link to a page or anchor that does not exist, or a markdown error fails it.
#   tests/docs/build_site.sh [SITE_DIR]      (default build/site)
# Exits 77 (ctest: skipped) without MkDocs Material; RGPU_SETUP_DOCS=1 scripts/setup.sh installs it.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
site="${1:-$repo/build/site}"
if ! python3 -c "import mkdocs, material" 2>/dev/null; then
  echo "docs_build: skipped: MkDocs Material is not installed for python3; RGPU_SETUP_DOCS=1 scripts/setup.sh installs it"
  exit 77
fi
# NO_MKDOCS_2_WARNING: Material's notice about its successor, printed on every build, is not ours.
NO_MKDOCS_2_WARNING=1 python3 -m mkdocs build --strict --quiet -f "$repo/mkdocs.yml" -d "$site"
echo "docs_build: built $site ($(find "$site" -name '*.html' | wc -l) pages)"
