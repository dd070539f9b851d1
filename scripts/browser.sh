#!/usr/bin/env bash
# Install Debian's chromium if it is missing, and the fonts a page of any language needs (the
# plan page's browser tests drive it through Playwright, no browser is downloaded; the briefing
# test's documents carry emoji and CJK, which without these fonts are drawn as empty boxes in
# the screenshots docs/ shows).
set -euo pipefail

FONTS=(fonts-noto-color-emoji fonts-noto-cjk)
missing=()
command -v chromium >/dev/null || missing+=(chromium)
for font in "${FONTS[@]}"; do
  dpkg-query -W -f='${Status}' "$font" 2>/dev/null | grep -q "install ok installed" || missing+=("$font")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing ${missing[*]} (apt)"
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
command -v chromium >/dev/null
