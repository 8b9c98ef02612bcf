#!/usr/bin/env bash
# ctest deploy_systemd_units: checks deploy/systemd/*.service offline, as systemd would read them
# (no running systemd needed): `systemd-analyze verify` must have nothing to say (it exits 0 even
# for unknown keys and bad values, so any output fails), and `systemd-analyze security` must rate
# each unit's exposure at most MAX_EXPOSURE (deploy/README.md states the scores).
#   check_units.sh [MAX_EXPOSURE]   (default 2.0, on systemd's scale of 0 to 10)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
max=${1:-2.0}
if ! command -v systemd-analyze >/dev/null; then
  echo "check_units: systemd-analyze is missing; install Debian's systemd package (scripts/setup.sh does)" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# verify wants each ExecStart= program to exist: stand-ins at the units' paths under $tmp.
failed=0
for unit in "$here"/*.service; do
  name=$(basename "$unit")
  sed "s|=/opt/rgpu/|=$tmp/opt/rgpu/|" "$unit" >"$tmp/$name"
  for prog in $(sed -n "s|^Exec[A-Za-z]*=[-+!@:]*\($tmp/[^ ]*\).*|\1|p" "$tmp/$name"); do
    mkdir -p "$(dirname "$prog")"
    ln -sf /bin/true "$prog"
  done
  ok=1
  out=$(systemd-analyze verify --man=no "$tmp/$name" 2>&1) || out="$out (exit status $?)"
  if [ -n "$out" ]; then
    echo "check_units: $name: systemd-analyze verify says:" >&2
    sed "s|$tmp/||g; s/^/  /" <<<"$out" >&2
    ok=0
  fi
  # --threshold compares with ten times the exposure systemd prints.
  threshold=$(awk -v m="$max" 'BEGIN { printf "%d", m * 10 + 0.5 }')
  score=$(systemd-analyze security --offline=true --no-pager "$unit" 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  if ! systemd-analyze security --offline=true --threshold="$threshold" --no-pager "$unit" >/dev/null 2>&1; then
    echo "check_units: $name: exposure $score is above $max (systemd-analyze security --offline=true $unit lists why)" >&2
    ok=0
  fi
  if ((ok)); then
    echo "check_units: $name: verified, exposure $score"
  else
    failed=1
  fi
done
exit $failed
