#!/bin/sh
# The cpu driver runs compiled kernels from the grid and push constants of each dispatch: its
# objects in the runtime library ($1) must reference none of the IR parser, lexer, printer or
# verifier, nor the kernel-IR simulator. Lists every offending reference and fails on one.
set -eu
lib="$1"
undefined=$(nm -A -C -u "$lib" | grep 'src_runtime_cpu_') || {
  echo "no cpu driver objects in $lib" >&2
  exit 1
}
bad=$(printf '%s\n' "$undefined" |
  grep -E 'kiln::(parseModule|parseModuleFile|print[A-Z][A-Za-z]*|verify[A-Z][A-Za-z]*|Lexer|sim::)' ||
  true)
if [ -n "$bad" ]; then
  echo "the cpu driver references the parser, printer, verifier or simulator:" >&2
  printf '%s\n' "$bad" >&2
  exit 1
fi
echo "cpu driver objects: $(printf '%s\n' "$undefined" | cut -d: -f2 | sort -u | wc -l), no parser, printer, verifier or simulator references"
