#!/usr/bin/env bash
# Full check, as CI runs it: installs missing packages, builds with --werror, runs every
# meson test (unit, lit, property, fuzz corpus replay, robustness), runs the unit tests
# again under ASan + UBSan, and fuzzes the parser and the ONNX importer for a bounded time
# with clang-19.
#
# Ends with one line `N passed, M failed`: each meson test counts once (from
# build/meson-logs/testlog.json) and each extra step (the --werror build, the sanitizer
# run, the fuzz run) counts once. Exits non-zero when anything failed.
#
#   KILN_FUZZ_SECONDS   how long to fuzz the parser (default 60)
#   KILN_FUZZ_ONNX_SECONDS  how long to fuzz the ONNX importer (default 30)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
set +e

fuzz_seconds="${KILN_FUZZ_SECONDS:-60}"
fuzz_onnx_seconds="${KILN_FUZZ_ONNX_SECONDS:-30}"
passed=0
failed=0

# Runs one extra step and counts it.
step() {
  local name="$1"
  shift
  echo "=== ${name}"
  if "$@"; then
    passed=$((passed + 1))
    echo "=== ${name}: ok"
  else
    failed=$((failed + 1))
    echo "=== ${name}: FAILED"
  fi
}

# Adds the results of a meson test run; a run that left no log counts as one failure.
count_meson_tests() {
  local log="$1/meson-logs/testlog.json" counts
  if [ ! -s "$log" ]; then
    failed=$((failed + 1))
    echo "=== meson test in $1: no test log (the build failed?)"
    return
  fi
  counts="$(python3 - "$log" <<'PY'
import json, sys
ok = bad = 0
for line in open(sys.argv[1]):
    result = json.loads(line).get("result")
    if result in ("OK", "EXPECTEDFAIL"):
        ok += 1
    elif result != "SKIP":
        bad += 1
print(ok, bad)
PY
)"
  passed=$((passed + ${counts% *}))
  failed=$((failed + ${counts#* }))
  echo "=== meson test in $1: ${counts% *} passed, ${counts#* } failed"
}

configure_werror() {
  if [ -f build/build.ninja ]; then
    meson configure build -Dwerror=true
  else
    meson setup build --werror
  fi
}

sanitizer_unit_tests() {
  if [ ! -f build-asan/build.ninja ]; then
    meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false || return 1
  fi
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-asan --suite unit --suite fuzz --print-errorlogs
}

fuzz_parser() {
  if [ ! -f build-fuzz/build.ninja ]; then
    CC=clang-19 CXX=clang++-19 meson setup build-fuzz -Dfuzz=enabled || return 1
  fi
  ninja -C build-fuzz tests/fuzz/fuzz-parser || return 1
  # New inputs go to a scratch folder so the checked-in corpus only changes by hand.
  local scratch artifacts
  scratch="$(mktemp -d)"
  artifacts="build-fuzz/fuzz-artifacts"
  mkdir -p "$artifacts"
  build-fuzz/tests/fuzz/fuzz-parser "$scratch" tests/fuzz/corpus/parser \
    -dict=tests/fuzz/kir.dict -max_total_time="$fuzz_seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 -artifact_prefix="$artifacts/"
  local rc=$?
  rm -rf "$scratch"
  [ "$rc" -eq 0 ] || echo "fuzz-parser found a failing input; it is in $artifacts/"
  return "$rc"
}

fuzz_onnx() {
  if [ ! -f build-fuzz/build.ninja ]; then
    CC=clang-19 CXX=clang++-19 meson setup build-fuzz -Dfuzz=enabled || return 1
  fi
  ninja -C build-fuzz tests/fuzz/fuzz-onnx || return 1
  local scratch artifacts
  scratch="$(mktemp -d)"
  artifacts="build-fuzz/fuzz-artifacts-onnx"
  mkdir -p "$artifacts"
  build-fuzz/tests/fuzz/fuzz-onnx "$scratch" tests/fuzz/corpus/onnx \
    -max_total_time="$fuzz_onnx_seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -print_final_stats=1 -artifact_prefix="$artifacts/"
  local rc=$?
  rm -rf "$scratch"
  [ "$rc" -eq 0 ] || echo "fuzz-onnx found a failing input; it is in $artifacts/"
  return "$rc"
}

if ! kiln_install_packages; then
  echo "0 passed, 1 failed"
  exit 1
fi

step "configure build/ with --werror" configure_werror
step "build (--werror)" ninja -C build
rm -f build/meson-logs/testlog.json
echo "=== meson test"
meson test -C build --print-errorlogs
count_meson_tests build
step "unit tests under ASan + UBSan" sanitizer_unit_tests
step "fuzz the parser for ${fuzz_seconds} s" fuzz_parser
step "fuzz the ONNX importer for ${fuzz_onnx_seconds} s" fuzz_onnx

echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
