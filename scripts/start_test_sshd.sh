#!/usr/bin/env bash
# Starts a throwaway sshd on loopback for the SSH tunnel tests (tests/python/sshd_fixture.py).
#
#   scripts/start_test_sshd.sh DIR
#
# Installs Debian's openssh-server if sshd is missing (as root, or through sudo), then makes DIR
# and writes into it a host key, a user key (DIR/user_key, no passphrase), an authorized_keys
# holding only that user key, a known_hosts line for the host key, and an sshd_config that
# listens on 127.0.0.1 on a free port, lets only the current user in, with that key only, and
# allows local port forwarding. It writes the port to DIR/port last (the tests wait for that
# file), then replaces itself with `sshd -D -e`: sshd stays in the foreground and logs to stderr,
# so whoever started this script stops sshd by killing the script's own pid.
#
# Exit status 2 with a message on stderr when sshd cannot be installed or started; the tests
# turn that into a skip that names the reason.
set -euo pipefail

dir=${1:?usage: $0 DIR (a folder for the keys, config and logs; created if missing)}
sshd=/usr/sbin/sshd

fail() { echo "start_test_sshd.sh: $*" >&2; exit 2; }

if [[ ! -x $sshd ]]; then
  if [[ $(id -u) == 0 ]]; then
    as_root=()
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
  else
    fail "$sshd is missing and installing openssh-server needs root or password-less sudo; run: apt-get install openssh-server"
  fi
  command -v apt-get >/dev/null || fail "$sshd is missing and there is no apt-get to install openssh-server with; install OpenSSH's server by hand"
  echo "start_test_sshd.sh: installing openssh-server (sshd is missing)" >&2
  # The package's install script would start the system sshd on port 22; a policy-rc.d that
  # answers 101 ("not allowed") stops that. Container images usually have one already; we add
  # one only for the duration of the install and only if there is none.
  policy=/usr/sbin/policy-rc.d
  added_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${as_root[@]}" tee "$policy" >/dev/null
    "${as_root[@]}" chmod 755 "$policy"
    added_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  installed=1
  "${as_root[@]}" apt-get install -y -q --no-install-recommends openssh-server >&2 ||
    { "${as_root[@]}" apt-get update -q >&2 &&
      "${as_root[@]}" apt-get install -y -q --no-install-recommends openssh-server >&2; } ||
    installed=0
  if [[ $added_policy == 1 ]]; then "${as_root[@]}" rm -f "$policy"; fi
  [[ $installed == 1 && -x $sshd ]] || fail "apt-get could not install openssh-server (see above); install it by hand"
fi

for tool in ssh-keygen python3; do
  command -v "$tool" >/dev/null || fail "$tool is missing; run: apt-get install openssh-client python3"
done

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
rm -f "$dir/port"
user=$(id -un)

# sshd refuses to start as root without its privilege separation folder (made by the system
# service normally, which we do not run).
if [[ $(id -u) == 0 && ! -d /run/sshd ]]; then
  mkdir -p /run/sshd && chmod 755 /run/sshd
fi

[[ -f $dir/host_key ]] || ssh-keygen -q -t ed25519 -N '' -C rgpu-test-host -f "$dir/host_key"
[[ -f $dir/user_key ]] || ssh-keygen -q -t ed25519 -N '' -C rgpu-test-user -f "$dir/user_key"
cp "$dir/user_key.pub" "$dir/authorized_keys"

# A free port: bind port 0 and let go of it. Something else could take it before sshd binds;
# sshd then exits with "Address already in use" and the tests' skip message shows that.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$dir/host_key.pub")" >"$dir/known_hosts"

# UsePAM no: PAM's session modules fail in containers, and public-key logins need no PAM.
# StrictModes no: the keys live in a temporary folder whose owners and modes sshd would reject.
cat >"$dir/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $dir/host_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
AllowUsers $user
StrictModes no
AllowTcpForwarding local
AllowAgentForwarding no
X11Forwarding no
PermitTTY no
MaxStartups 50
LogLevel VERBOSE
EOF

"$sshd" -t -f "$dir/sshd_config" || fail "sshd rejects the generated $dir/sshd_config (see above)"
echo "$port" >"$dir/port"
exec "$sshd" -D -e -f "$dir/sshd_config"
