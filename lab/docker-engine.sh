#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine.
#
# - An engine that already answers is used as it is: nothing is installed,
#   started or reconfigured.
# - Otherwise Debian's docker.io is installed (when dockerd is missing) and
#   dockerd is started in the background (there is no systemd on the build
#   machines), then this waits until `docker info` answers.
#
# Idempotent: run it as often as you like.
set -euo pipefail

LOG=${DGXSPARK_DOCKERD_LOG:-/var/log/dgxspark-dockerd.log}
WAIT_SECONDS=${DGXSPARK_DOCKERD_WAIT:-60}

say() { printf 'docker-engine: %s\n' "$*"; }

if docker info >/dev/null 2>&1; then
  say "engine already answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null)); leaving it alone"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  say "no Docker engine answers and starting one needs root; start Docker or rerun as root" >&2
  exit 1
fi

if ! command -v dockerd >/dev/null 2>&1; then
  say "installing Debian's docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q docker.io >/dev/null
fi

if pgrep -x dockerd >/dev/null 2>&1; then
  say "dockerd is running but does not answer yet; waiting for it"
else
  say "starting dockerd in the background (log: $LOG)"
  mkdir -p "$(dirname "$LOG")"
  # setsid: the daemon must outlive the make/CI step that started it.
  setsid dockerd >>"$LOG" 2>&1 < /dev/null &
fi

for _ in $(seq 1 "$WAIT_SECONDS"); do
  if docker info >/dev/null 2>&1; then
    say "engine answers ($(docker version --format '{{.Server.Version}}')); dockerd log: $LOG"
    exit 0
  fi
  sleep 1
done
say "dockerd did not answer within ${WAIT_SECONDS}s; last lines of $LOG:" >&2
tail -n 20 "$LOG" >&2 || true
exit 1
