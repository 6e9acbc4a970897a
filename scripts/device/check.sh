#!/bin/bash
# Runs kiln's GPU checks on a lent machine from the repository root: bench/run.py on cuda[0]
# and vulkan[0] against PyTorch on the GPU and per-dispatch profiles (first, while the GPU is
# otherwise idle), then random programs, the ONNX node tests and the PyTorch-exported decoders
# on both (NVIDIA's Vulkan driver, with the Khronos validation layer for the random programs
# and decoders).
# Writes $OUT/summary.txt and $OUT/logs.tar.gz. PHASES picks: correct, bench-cuda, bench-vulkan,
# profile, profile-vulkan (default all); LIMIT caps each correctness job and BENCH_LIMIT each
# bench (seconds); BENCH_ARGS adds arguments to bench/run.py (e.g. --only=decoder, or
# --match='4096x4096|decoder').
# BASELINE=FILE (a stripped kiln of an earlier commit, xz-compressed, run with the same packed
# libraries) times the same bench/run.py workloads with that kiln on each benched device, in
# the same call: a before/after on the same card (BASELINE_ARGS: other bench/run.py
# arguments for it, e.g. fewer workloads).
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; S=$OUT/summary.txt; rm -f $S
L=/tmp/klogs; rm -rf $L; mkdir -p $L
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $S; }
CUDA=${CUDA:-cuda[0]}; VK=${VK:-vulkan[0]}; LIMIT=${LIMIT:-150}; PY=${PY:-python3}
PHASES=${PHASES:-correct bench-cuda bench-vulkan profile profile-vulkan}; BENCH_ARGS=${BENCH_ARGS:-}; BENCH_LIMIT=${BENCH_LIMIT:-150}
K=/tmp/k
if [ ! -x $K/bin/kiln ]; then
  mkdir -p $K && tar xJf .gpu/pack.tar.xz -C $K
  for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig   # the Vulkan loader, glvnd, layers
fi
# Wrappers: the packed libraries (Debian's libstdc++ among them) for kiln only, not for python.
mkdir -p $K/w
for b in kiln kiln-onnx-conformance kiln-runtime-differential; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib exec %s/bin/%s "$@"\n' $K $K $b > $K/w/$b; chmod +x $K/w/$b
done
W=$K/w
ldconfig -p | grep -q 'libcuda.so.1 ' || {
  c=$(find /usr/local/nvidia /usr/lib /usr/lib64 -name libcuda.so.1 2>/dev/null | head -1)
  [ -n "$c" ] && export KILN_CUDA_LIBRARY=$c; }
[ -z "${VK_DRIVER_FILES:-}" ] && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] &&
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; $W/kiln devices; } >> $S 2>&1
has() { [[ " $PHASES " == *" $1 "* ]]; }
run() { local name=$1; shift; ( t=$(date +%s); timeout -s KILL $LIMIT stdbuf -oL -eL "$@" > $L/$name.log 2>&1
  echo "rc=$? secs=$(( $(date +%s) - t ))" >> $L/$name.log ) & }
read -r -a BENCH_ARGV <<< "$BENCH_ARGS"
read -r -a BASELINE_ARGV <<< "${BASELINE_ARGS:-$BENCH_ARGS}"
bench() { timeout -s KILL $BENCH_LIMIT env PYTHONUNBUFFERED=1 $PY bench/run.py --device=$1 --reference=cuda --kiln $W/kiln \
  --repetitions=5 --warmup=1 --timeout=40 --keep=/tmp/bk "${BENCH_ARGV[@]}" > $L/bench-$2.log 2>&1; echo "rc=$?" >> $L/bench-$2.log
  log "bench on $1 done"; grep -v "^$" $L/bench-$2.log >> $S; }
has bench-cuda && bench $CUDA cuda
if [ -n "${BASELINE:-}" ] && [ -f "$BASELINE" ]; then
  xz -dc "$BASELINE" > $K/bin/kiln-base && chmod +x $K/bin/kiln-base
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib exec %s/bin/kiln-base "$@"\n' $K $K > $W/kiln-base; chmod +x $W/kiln-base
fi
baseline() { # $1: the device, $2: its log's name
  [ -x $W/kiln-base ] || return 0
  timeout -s KILL $BENCH_LIMIT env PYTHONUNBUFFERED=1 $PY bench/run.py --device=$1 --reference=cuda --kiln $W/kiln-base \
    --repetitions=5 --warmup=1 --timeout=40 "${BASELINE_ARGV[@]}" > $L/baseline-$2.log 2>&1; echo "rc=$?" >> $L/baseline-$2.log
  log "baseline bench on $1 done ($BASELINE)"; grep -v "^$" $L/baseline-$2.log >> $S; }
has bench-cuda && baseline $CUDA cuda
has bench-vulkan && bench $VK vulkan
has bench-vulkan && baseline $VK vulkan
profiles() { # $1: the device
  local dev=$1 B=/tmp/bk
  prof() { echo "### $1 on $dev" >> $L/profiles.log; shift
    timeout -s KILL 30 $W/kiln bench "$@" --device=$dev --repetitions=5 --warmup=1 --profile >> $L/profiles.log 2>&1; }
  g=$(grep -l "tensor<4096x4096xf32>" $B/gemm*/gemm.kir | head -1); [ -n "$g" ] && prof "gemm f32 4096" $g --input=@$(dirname $g)/a.npy
  h=$(grep -l "tensor<4096x4096xf16>" $B/gemm*/gemm.kir | head -1); [ -n "$h" ] && prof "gemm f16 4096" $h --input=@$(dirname $h)/a.npy
  e=$(grep -l " exp " $B/elementwise*/elementwise.kir 2>/dev/null | head -1); [ -n "$e" ] && prof "exp" $e --input=@$(dirname $e)/x.npy
  # The decoder layers' prefill of 2048 tokens (_1) and decode at context 2048 (_3), their
  # inputs (TAG_NAME.npy) in the order @main's arguments name them.
  for tag in tinyllama_1 tinyllama_3 llama3-8b_1 llama3-8b_3; do
    [ -f $B/$tag.kir ] || continue
    local ins; ins=$(grep -o '^func @main([^)]*' $B/$tag.kir | grep -o '%[A-Za-z0-9_]*:' | tr -d '%:' |
      while read -r n; do printf -- '--input=@%s/%s_%s.npy ' $B $tag $n; done)
    # shellcheck disable=SC2086
    prof "decoder $tag" $B/$tag.kir $ins
  done
}
if [ -d /tmp/bk ]; then
  rm -f $L/profiles.log
  has profile && profiles $CUDA
  has profile-vulkan && profiles $VK
  [ -f $L/profiles.log ] && { log "profiles done"; cat $L/profiles.log >> $S; }
fi
if has correct; then
  CF="--same-as-ref --rules=tests/conformance/unsupported.txt --tolerances=tests/conformance/tolerances.txt"
  for dev in $CUDA $VK; do
    n=${dev%%[*}
    for k in 0 1 2 3 4 5; do
      run rdiff-$n-$k env KILN_VULKAN_VALIDATION=1 $W/kiln-runtime-differential --device=$dev \
        --first-seed=$((1+k*150)) --seeds=150 --symbolic-seeds=0
    done
    run rdiff-$n-sym env KILN_VULKAN_VALIDATION=1 $W/kiln-runtime-differential --device=$dev --seeds=0 --symbolic-seeds=80
    i=0; for f in '^test_[a-c]' '^test_[d-l]' '^test_[m-r]' '^test_[s-z]'; do
      run conf-$n-$i $W/kiln-onnx-conformance --device=$dev $CF --filter="$f" $K/data/node; i=$((i+1)); done
    run decoder-$n env PYTHONUNBUFFERED=1 $PY tests/e2e/onnx_decoder.py --kiln $W/kiln --source-root . --device=$dev
  done
  wait
  log "correctness done"
  for f in $L/*.log; do echo "== $(basename $f .log): $(grep -E 'programs (identical|match)|^[0-9]+ passed,|^rc=|tests pass on ref|^OK$|validation layer reported' $f | tr '\n' ' ')" >> $S; done
  grep -h "^seed \|^REGRESSION\|^FAIL" $L/*.log | grep -v castlike | cut -c1-300 | head -60 >> $S
fi
tar czf $OUT/logs.tar.gz -C $L .
log end
