# Set-up shared by demo.sh and test.sh (sourced, not run): installs the Debian packages in
# scripts/packages.txt that are missing and configures build/ when it does not exist.
set -euo pipefail

KILN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$KILN_ROOT"

# Runs a command as root: directly when we are root, else through sudo.
kiln_as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "error: installing packages needs root or sudo: $*" >&2
    return 1
  fi
}

# apt-get runs only when something is missing, so a set-up machine needs no network.
kiln_install_packages() {
  local missing=() line pkg status
  while IFS= read -r line; do
    pkg="${line%%#*}"
    pkg="${pkg//[[:space:]]/}"
    [ -n "$pkg" ] || continue
    status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
    [ "$status" = "install ok installed" ] || missing+=("$pkg")
  done < scripts/packages.txt
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing missing packages: ${missing[*]}"
    kiln_as_root env DEBIAN_FRONTEND=noninteractive apt-get update
    kiln_as_root env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends "${missing[@]}"
  fi
}

# Every build folder is configured through kiln_setup so that meson finds LLVM 19.
kiln_setup() {
  local dir="$1"
  shift
  meson setup "$dir" --native-file "$KILN_ROOT/scripts/llvm-19.ini" "$@"
}

kiln_configure() {
  if [ ! -f build/build.ninja ]; then
    kiln_setup build "$@"
  fi
}
