#!/usr/bin/env bash
# Install the Debian packages the build machine needs and does not have yet:
# debootstrap and busybox-static (lab images), shellcheck (ansible-test sanity),
# openssh-client (Ansible's transport), haproxy (the gateway_server module's tests drive a real one on loopback),
# graphviz (tests/unit/test_docs_architecture.py renders docs/architecture.dot).
# Installs nothing when all are present.
set -euo pipefail
declare -A want=([debootstrap]=debootstrap [busybox]=busybox-static [shellcheck]=shellcheck [ssh]=openssh-client
                 [ssh-keygen]=openssh-client [haproxy]=haproxy [dot]=graphviz)
missing=()
for tool in "${!want[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${want[$tool]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "host-deps: missing ${missing[*]}; install them (apt-get install ${missing[*]}) or rerun as root" >&2
  exit 1
fi
mapfile -t pkgs < <(printf '%s\n' "${missing[@]}" | sort -u)
echo "host-deps: installing ${pkgs[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null
