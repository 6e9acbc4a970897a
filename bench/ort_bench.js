// Times one ONNX model on ONNX Runtime's CPU execution provider (onnxruntime-node, installed
// in bench/.ort; bench/models.py and bench/compile_time.py run this with NODE_PATH pointing
// there). Prints one JSON line: {"median_ms": M, "times_ms": [...], "create_ms": C}, where C
// is the session creation (loading and optimizing the model), the counterpart of kiln compile.
//
// usage: node ort_bench.js MODEL.onnx INPUT.raw float32|int64 D0,D1,... THREADS WARMUP REPS
//        node ort_bench.js MODEL.onnx INPUTS.json THREADS WARMUP REPS [OUT_PREFIX]
// The second form feeds several inputs: INPUTS.json is a list of {"name", "raw", "dtype",
// "dims"} (bench/run.py's decoder layers); with OUT_PREFIX it writes each output's raw data
// (the last call's) to OUT_PREFIX + its name + ".raw", for run.py to check.
const fs = require('fs');
const ort = require('onnxruntime-node');

function tensor(raw, dtype, dims) {
  const bytes = fs.readFileSync(raw);
  const buf = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  const data = dtype === 'int64' ? new BigInt64Array(buf) : new Float32Array(buf);
  return new ort.Tensor(dtype, data, dims);
}

async function main() {
  let args = process.argv.slice(2);
  let spec = null;
  if (args[1].endsWith('.json')) {
    spec = JSON.parse(fs.readFileSync(args[1], 'utf8'));
    args = [args[0], null, null, null, ...args.slice(2)];
  }
  const [model, raw, dtype, dims, threads, warmup, reps, outPrefix] = args;
  const created = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: Number(threads),
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
  });
  const createMs = Number(process.hrtime.bigint() - created) / 1e6;
  const feeds = {};
  if (spec) {
    for (const s of spec) feeds[s.name] = tensor(s.raw, s.dtype, s.dims);
  } else {
    feeds[session.inputNames[0]] = tensor(raw, dtype, dims.split(',').map(Number));
  }
  for (let i = 0; i < Number(warmup); ++i) await session.run(feeds);
  const times = [];
  let results = null;
  for (let i = 0; i < Number(reps); ++i) {
    const start = process.hrtime.bigint();
    results = await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  if (outPrefix) {
    for (const [name, t] of Object.entries(results)) {
      fs.writeFileSync(outPrefix + name + '.raw',
                       Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    }
  }
  const sorted = [...times].sort((a, b) => a - b);
  console.log(JSON.stringify(
      {median_ms: sorted[Math.floor(sorted.length / 2)], times_ms: times, create_ms: createMs}));
}

main().catch((e) => {
  console.error(e.message || String(e));
  process.exit(1);
});
