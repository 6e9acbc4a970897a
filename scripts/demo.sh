#!/usr/bin/env bash
# Quick start: installs what kiln needs (Debian 12), builds the kiln tool and runs
# examples/demo.kir on the default device (cpu[0]: the model compiled to x86-64 code).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

kiln_install_packages
kiln_configure
ninja -C build tools/kiln
build/tools/kiln run examples/demo.kir
