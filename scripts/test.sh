#!/usr/bin/env bash
# Full check, as CI runs it: installs missing packages, builds with --werror, runs every
# meson test (unit, lit, property, fuzz corpus replay, robustness), runs the unit and fuzz
# suites again under ASan + UBSan, and fuzzes the parser, the .kmod loader, the ONNX importer
# and the vulkan payload parser for a bounded time with clang-19. The sanitizer run and the
# fuzzers share one clang build, build-fuzz/ (ASan + UBSan + libFuzzer coverage on the whole
# project): gcc's ASan + UBSan build of the library alone took 35 of CI's minutes.
#
# Ends with one line `N passed, M failed`: each meson test counts once (from
# build/meson-logs/testlog.json) and each extra step (the --werror build, the sanitizer
# run, the fuzz run) counts once. Exits non-zero when anything failed.
#
#   KILN_FUZZ_SECONDS         how long to fuzz the parser (default 60)
#   KILN_FUZZ_MODULE_SECONDS  how long to fuzz the .kmod loader (default 30)
#   KILN_FUZZ_ONNX_SECONDS    how long to fuzz the ONNX importer (default 30)
#   KILN_FUZZ_VULKAN_SECONDS  how long to fuzz the vulkan payload parser (default 15)
#
# Vulkan: every command runs with the Khronos validation layer (KILN_VULKAN_VALIDATION=1; a
# message fails the vulkan tests and any kiln command) on lavapipe, unless VK_DRIVER_FILES or
# VK_ICD_FILENAMES already names a driver (set it to a GPU's ICD to test on that GPU).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
set +e

export KILN_VULKAN_VALIDATION="${KILN_VULKAN_VALIDATION:-1}"
lavapipe=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -z "${VK_ICD_FILENAMES:-}" ] && [ -f "$lavapipe" ]; then
  export VK_DRIVER_FILES="$lavapipe"
fi

fuzz_seconds="${KILN_FUZZ_SECONDS:-60}"
fuzz_module_seconds="${KILN_FUZZ_MODULE_SECONDS:-30}"
fuzz_onnx_seconds="${KILN_FUZZ_ONNX_SECONDS:-30}"
fuzz_vulkan_seconds="${KILN_FUZZ_VULKAN_SECONDS:-15}"
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
    kiln_setup build --werror
  fi
}

# build-fuzz/: clang-19, libFuzzer targets, ASan + UBSan on everything (meson.build's
# fuzz_whole_build). A folder configured otherwise (an older checkout's) is reconfigured.
sanitized_options=(-Dfuzz=enabled -Db_sanitize=address,undefined -Db_lundef=false)
configure_sanitized() {
  if [ ! -f build-fuzz/build.ninja ]; then
    CC=clang-19 CXX=clang++-19 kiln_setup build-fuzz "${sanitized_options[@]}"
  elif ! meson introspect build-fuzz --buildoptions | python3 -c '
import json, sys
options = {o["name"]: o["value"] for o in json.load(sys.stdin)}
sys.exit(0 if options.get("b_sanitize") == "address,undefined" and not options.get("b_lundef")
         and options.get("fuzz") == "enabled" else 1)'; then
    meson configure build-fuzz "${sanitized_options[@]}"
  fi
}

sanitizer_unit_tests() {
  configure_sanitized || return 1
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-fuzz --suite unit --suite fuzz --print-errorlogs
}

# Fuzzes one libFuzzer target for a bounded time: fuzz_target NAME CORPUS SECONDS [FLAG...].
# New inputs go to a scratch folder so the checked-in corpus only changes by hand.
fuzz_target() {
  local name="$1" corpus="$2" seconds="$3"
  shift 3
  configure_sanitized || return 1
  ninja -C build-fuzz "tests/fuzz/$name" || return 1
  local scratch artifacts
  scratch="$(mktemp -d)"
  artifacts="build-fuzz/fuzz-artifacts/$name"
  mkdir -p "$artifacts"
  "build-fuzz/tests/fuzz/$name" "$scratch" "$corpus" "$@" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/"
  local rc=$?
  rm -rf "$scratch"
  [ "$rc" -eq 0 ] || echo "$name found a failing input; it is in $artifacts/"
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
step "fuzz the parser for ${fuzz_seconds} s" \
  fuzz_target fuzz-parser tests/fuzz/corpus/parser "$fuzz_seconds" \
  -dict=tests/fuzz/kir.dict -max_len=4096
step "fuzz the module loader for ${fuzz_module_seconds} s" \
  fuzz_target fuzz-module tests/fuzz/corpus/module "$fuzz_module_seconds" -max_len=16384
step "fuzz the ONNX importer for ${fuzz_onnx_seconds} s" \
  fuzz_target fuzz-onnx tests/fuzz/corpus/onnx "$fuzz_onnx_seconds" -max_len=8192
step "fuzz the vulkan payload parser for ${fuzz_vulkan_seconds} s" \
  fuzz_target fuzz-vulkan-payload tests/fuzz/corpus/vulkan_payload "$fuzz_vulkan_seconds" \
  -max_len=8192

echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
