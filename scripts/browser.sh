#!/usr/bin/env bash
# Install Debian's chromium if it is missing: the plan page's browser tests drive it
# (tests/e2e/test_plan_page_browser.py, through Playwright; no browser is downloaded).
set -euo pipefail

if command -v chromium >/dev/null; then
  exit 0
fi
echo "installing chromium (apt)"
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null
