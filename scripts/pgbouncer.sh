#!/usr/bin/env bash
# Install Debian's pgbouncer if it is missing: the tests of a fleet behind PgBouncer start one
# of their own in transaction pooling mode (tests/integration/test_pgbouncer.py); no service is
# enabled or started here.
set -euo pipefail

if command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ]; then
  exit 0
fi
echo "installing pgbouncer (apt)"
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq pgbouncer >/dev/null
command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ]
