#!/usr/bin/env bash
# Installs the real servers the integration tests start on 127.0.0.1, and the browser that loads the console
# (Debian packages).
# Idempotent: does nothing when they are all present. Needs root (CI runs as root).
set -euo pipefail
need=()
command -v prometheus >/dev/null || need+=(prometheus)
command -v promtool >/dev/null || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null || need+=(prometheus-alertmanager)
command -v prometheus-pushgateway >/dev/null || need+=(prometheus-pushgateway)
command -v redis-server >/dev/null || need+=(redis-server)
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v slurmd >/dev/null || need+=(slurmd)
command -v scontrol >/dev/null || need+=(slurm-client)
command -v munged >/dev/null || need+=(munge)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v chromium >/dev/null || need+=(chromium)   # the console's browser tests (headless, DevTools protocol)
if [ ${#need[@]} -eq 0 ]; then
  echo "services: all present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# policy-rc.d 101: packages must not start their own daemons; the tests start what they need
$SUDO sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d'
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
$SUDO rm -f /usr/sbin/policy-rc.d
echo "services: installed ${need[*]}"
