#!/usr/bin/env bash
# ctest deploy_kubernetes_manifests: validates deploy/kubernetes/*.yaml against the Kubernetes API
# schemas, offline, with PyPI's kubernetes-validate (it carries the schemas of each release):
# strict, so a misspelt field fails too. Checked against the newest release it knows and the
# oldest still commonly run. kustomization.yaml is kustomize's, not an API object: left out.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! python3 -c "import kubernetes_validate" 2>/dev/null; then
  echo "check_manifests: kubernetes-validate is missing; python3 -m pip install kubernetes-validate (scripts/setup.sh does)" >&2
  exit 1
fi
files=()
for f in "$here"/*.yaml; do
  [ "$(basename "$f")" = kustomization.yaml ] || files+=("$f")
done
status=0
for version in 1.37.0 1.29.0; do
  python3 -m kubernetes_validate --strict --kubernetes-version "$version" "${files[@]}" || status=1
done
exit $status
