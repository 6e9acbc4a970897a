#!/bin/bash
# Packs a full kiln (compiler and drivers), the GPU test harnesses, the shared libraries they
# load that a bare GPU machine lacks, and the ONNX node tests into .gpu/pack.tar.xz (about
# 50 MB at xz -9e: with .gl's .debs and the tree, under the 64 MiB a device call carries).
# Run after building build/ (docs/gpu.md,
# "Running the checks on a lent GPU").
set -euo pipefail
cd "$(dirname "$0")/../.."
P=$(mktemp -d); trap 'rm -rf $P' EXIT
mkdir -p $P/bin $P/lib $P/data .gpu
B="build/tools/kiln build/tests/conformance/kiln-onnx-conformance build/tests/property/kiln-runtime-differential"
for b in $B; do strip -o $P/bin/$(basename $b) $b; done
# Everything they link but the C library itself (the other machine's is newer).
for l in $(ldd $B | awk '/=>/{print $3}' | sort -u | grep -v -E '/(libc|libm|libgcc_s|libpthread|libdl|librt)\.so'); do
  cp -L $l $P/lib/
done
cp -r /usr/share/libonnx-testdata/data/node $P/data/
tar cf - -C $P . | xz -T0 -9e > .gpu/pack.tar.xz
ls -la .gpu/pack.tar.xz
