#!/usr/bin/env python3
"""kiln's benchmark harness: GEMM sweep, Llama-style decoder layers (TinyLlama-1.1B in f32;
Llama-3-8B with bf16 weights, --layer) and elementwise transcendental functions against
numpy/OpenBLAS, PyTorch CPU and (decoders) ONNX Runtime CPU, printed as markdown tables.

Every workload is written as kiln text IR (.kir) with its weights in a safetensors file
and its inputs as .npy files, in a temporary folder. kiln times it with `kiln bench`
(the median of --repetitions calls after --warmup calls); the reference runs the same
computation on the same inputs in this process, timed the same way, with the same
number of threads. kiln's outputs (from one `kiln run`) are checked against the
reference's. docs/bench.md says what each workload is.

usage: run.py [--device=cpu|ref|vulkan[N]|...] [--reference=cpu|cuda] [--threads=N] [--quick]
              [--only=gemm|decoder|elementwise] [--layer=tinyllama|llama3-8b|all] [--match=TEXT]
              [--kiln=PATH] [--repetitions=N] [--warmup=N] [--no-check] [--keep=DIR]

On a GPU device (--device=vulkan, vulkan[N], hip[N]) the GEMM table also has f16 GEMMs
(f16 A and B, f16 C), and --reference=cuda times PyTorch on the GPU (cuBLAS) instead of
numpy/PyTorch on the CPU.
Exit status 1 when kiln fails on a workload or its outputs do not match the reference.
"""
import argparse
import json
import math
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))

# kiln's output matches the reference when max|kiln - ref| <= TOLERANCE * max|ref| for
# every output. kiln's ref device computes in f64 and rounds once, numpy and PyTorch
# compute in f32, so the difference is f32 rounding accumulated over K-long sums.
TOLERANCE = 1e-3

# Device kinds whose kernels run on a GPU: kiln's time there includes host transfers of the
# inputs and outputs, and the GEMM table adds f16 GEMMs.
GPU_KINDS = ("vulkan", "hip", "cuda")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu",
                   help="kiln device: KIND or KIND[N] as `kiln devices` lists them (default cpu; ref "
                   "for the interpreter; vulkan or vulkan[N] for a Vulkan GPU)")
    p.add_argument("--reference", choices=["cpu", "cuda"], default="cpu",
                   help="where the reference runs: cpu (numpy/OpenBLAS and PyTorch CPU, the default) "
                   "or cuda (PyTorch on the GPU, cuBLAS; needs torch with CUDA)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads for kiln (--cpu-threads, cpu device only) and the reference "
                   "(default: all cores)")
    p.add_argument("--quick", action="store_true",
                   help="small shapes, 2 repetitions after 1 warmup (what CI runs)")
    p.add_argument("--only", choices=["gemm", "decoder", "elementwise"], help="run one group of workloads")
    p.add_argument("--layer", choices=["tinyllama", "llama3-8b", "all"], default="tinyllama",
                   help="decoder layers: TinyLlama-1.1B (f32, the default), Llama-3-8B (bf16 "
                   "weights, 436 MB; seconds per prefill call) or both")
    p.add_argument("--match", metavar="TEXT", help="run only the workloads whose name contains TEXT (or one of "
                   "several TEXTs separated by |)")
    p.add_argument("--kiln", default=os.path.join(HERE, "..", "build", "tools", "kiln"),
                   help="the kiln binary (default build/tools/kiln)")
    p.add_argument("--repetitions", type=int, help="timed calls (default 10, 2 with --quick)")
    p.add_argument("--warmup", type=int, help="untimed calls first (default 2, 1 with --quick)")
    p.add_argument("--warmup-ms", type=int, help="then untimed calls until this many ms have "
                   "passed, on both sides (default 200, 0 with --quick): the first calls of a "
                   "short workload run on cold cores and caches")
    p.add_argument("--timeout", type=float, default=1800,
                   help="seconds one kiln command may take before it counts as failed (default 1800)")
    p.add_argument("--no-check", action="store_true", help="skip the numerical check (one kiln run each)")
    p.add_argument("--no-attention", action="store_true",
                   help="give kiln --no-attention: the decoder's softmax(QK^T)V chain stays a "
                   "matmul/softmax/matmul chain instead of one attention op (docs/attention.md)")
    p.add_argument("--keep", metavar="DIR", help="write the workloads to DIR and keep them")
    a = p.parse_args()
    if a.threads < 1:
        p.error("--threads must be at least 1")
    a.repetitions = a.repetitions or (2 if a.quick else 10)
    a.warmup = a.warmup if a.warmup is not None else (1 if a.quick else 2)
    a.warmup_ms = a.warmup_ms if a.warmup_ms is not None else (0 if a.quick else 200)
    if a.repetitions < 1 or a.warmup < 0:
        p.error("--repetitions must be at least 1 and --warmup at least 0")
    m = re.fullmatch(r"([a-z]+)(?:\[(\d+)\])?", a.device)
    if not m:
        p.error(f"--device={a.device}: expected KIND or KIND[N], such as cpu or vulkan[0]")
    a.kind = m.group(1)
    a.device_id = f"{a.kind}[{m.group(2) or 0}]"
    a.gpu = a.kind in GPU_KINDS
    return a


ARGS = parse_args()
# The thread count must be set before numpy and torch load their BLAS and OpenMP.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402


# ---- shapes -------------------------------------------------------------------------------

def gemm_workloads(quick, gpu=False):
    """(name, M, K, N, weight dtype): A is an f32 M x K input, B a K x N weight; dtype "i8":
    B is an int8 weight times an f32 scale per column (a dequantized QDQ weight); dtype "f16
    all" (GPU devices only): A, B and C are f16, accumulated in f32."""
    if quick:
        squares, ms, kns, low = [16, 32], [1, 8], [(64, 64), (64, 96), (96, 64)], [(64, 96)]
    else:
        squares = [256, 512, 1024, 2048, 4096]
        ms = [1, 128]
        kns = [(2048, 2048), (2048, 5632), (2048, 256), (5632, 2048)]
        low = kns
    out = [(f"gemm f32 {n}x{n}x{n}", n, n, n, "f32") for n in squares]
    out += [(f"gemm f32 M={m} K={k} N={n}", m, k, n, "f32") for m in ms for k, n in kns]
    for dt in ("f16", "bf16", "i8"):
        out += [(f"gemm {dt} weights M={m} K={k} N={n}", m, k, n, dt) for m in ms for k, n in low]
    if gpu:
        out += [(f"gemm f16 {n}x{n}x{n}", n, n, n, "f16 all") for n in squares]
    return out


class Layer:
    """Llama decoder layer shapes and weight type: TinyLlama-1.1B in f32 or Llama-3-8B with
    bf16 weights, or a small layer of the same kind for --quick."""

    def __init__(self, kind, quick):
        self.kind = kind
        if kind == "llama3-8b":
            self.name, self.dtype, self.theta = "Llama-3-8B", "bf16", 500000.0
            shapes = (64, 4, 2, 16, 224) if quick else (4096, 32, 8, 128, 14336)
        else:
            self.name, self.dtype, self.theta = "TinyLlama-1.1B", "f32", 10000.0
            shapes = (64, 4, 2, 16, 160) if quick else (2048, 32, 4, 64, 5632)
        self.hidden, self.heads, self.kv_heads, self.head_dim, self.ffn = shapes
        if quick:
            self.name += "-shaped (--quick)"
            self.prefill, self.contexts = [8, 16], [8, 16]
        else:
            self.prefill, self.contexts = [128, 2048], [128, 2048]
        self.eps = 1e-5
        self.file = f"decoder_{kind}.safetensors"
        assert self.heads * self.head_dim == self.hidden and self.heads % self.kv_heads == 0

    def weight_bytes(self):
        h, kvd, f = self.hidden, self.kv_heads * self.head_dim, self.ffn
        matrices = 2 * h * h + 2 * h * kvd + 3 * h * f
        return matrices * (4 if self.dtype == "f32" else 2) + 2 * h * 4

    def describe(self):
        return (f"{self.name}: hidden {self.hidden}, {self.heads} heads, {self.kv_heads} KV heads, "
                f"head dim {self.head_dim}, FFN {self.ffn}; "
                + ("f32" if self.dtype == "f32" else f"{self.dtype} weights, f32 activations"))


def layers(quick):
    return [Layer(kind, quick) for kind in ("tinyllama", "llama3-8b") if ARGS.layer in (kind, "all")]


def decoder_workloads(layer):
    """(name, tokens, past context, static cache): past 0 is a causal prefill, else a
    one-token decode that takes the past K/V as inputs, or with a static cache, writes this
    step's K/V into a donated cache of past + 1 positions in place and attends over it."""
    out = [(f"decoder prefill {t} tokens", t, 0, False) for t in layer.prefill]
    out += [(f"decoder decode 1 token, context {c}", 1, c, False) for c in layer.contexts]
    out += [(f"decoder decode 1 token, context {c}, KV cache donated", 1, c, True)
            for c in layer.contexts]
    return out


def elementwise_workloads(quick):
    """(name, kiln op text on %x, PyTorch function, input kind): one op over a vector."""
    n = 4096 if quick else 4 * 1024 * 1024
    return [(f"{name} f32 {n // 1024}x1024" if kind == "rows" else f"{name} f32 {n}", n, op, fn, kind)
            for name, op, fn, kind in [
        ("gelu", "gelu %x", lambda t, x: t.nn.functional.gelu(x), "normal"),
        ("gelu tanh", 'gelu %x {approximate = "tanh"}',
         lambda t, x: t.nn.functional.gelu(x, approximate="tanh"), "normal"),
        ("tanh", "tanh %x", lambda t, x: t.tanh(x), "normal"),
        ("erf", "erf %x", lambda t, x: t.erf(x), "normal"),
        ("exp", "exp %x", lambda t, x: t.exp(x), "normal"),
        ("log", "log %x", lambda t, x: t.log(x), "positive"),
        ("sin", "sin %x", lambda t, x: t.sin(x), "normal"),
        ("log_softmax", "log_softmax %x {axis = -1}",
         lambda t, x: t.log_softmax(x, dim=-1), "rows"),
        ("pow", "pow %x, %x", lambda t, x: t.pow(x, x), "positive"),
    ]]


def selected(workloads):
    return [w for w in workloads
            if not ARGS.match or any(t in w[0] for t in ARGS.match.split("|"))]


# ---- files --------------------------------------------------------------------------------

def bf16_bits(a):
    """f32 -> bf16 bit patterns (uint16), rounded to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def save_safetensors(path, tensors):
    """tensors: name -> (safetensors dtype, array holding the bytes)."""
    header, offset = {}, 0
    for name, (dtype, arr) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, arr in tensors.values():
            f.write(np.ascontiguousarray(arr).tobytes())


def ttype(shape, elem="f32"):
    return "tensor<" + "".join(f"{d}x" for d in shape) + elem + ">"


class Kir:
    """Builds a .kir function: one op per line, results named by the caller."""

    def __init__(self):
        self.weights, self.lines = [], []

    def weight(self, name, shape, elem, file):
        self.weights.append(f'weight @{name} : {ttype(shape, elem)} = "{file}"["{name}"]')
        self.op(name, f'weight {{name = "{name}"}}', shape, elem)
        return f"%{name}"

    def op(self, result, text, shape, elem="f32"):
        self.lines.append(f"  %{result} = {text} : {ttype(shape, elem)}")
        return f"%{result}"

    def text(self, args, results):
        """args: (name, shape) or (name, shape, elem, suffix) such as " donate 1"; results:
        (value, shape) or (value, shape, elem)."""
        sig = ", ".join(f"%{a[0]}: {ttype(a[1], *a[2:3])}{''.join(a[3:])}" for a in args)
        res = ", ".join(ttype(r[1], *r[2:3]) for r in results)
        body = "\n".join(self.lines)
        ret = ", ".join(r[0] for r in results)
        return "\n".join(self.weights) + f"\n\nfunc @main({sig}) -> ({res}) {{\n{body}\n  return {ret}\n}}\n"


# ---- running kiln -------------------------------------------------------------------------

def kiln_cmd(command, kir, inputs):
    cmd = [ARGS.kiln, command, kir, f"--device={ARGS.device}"] + [f"--input=@{i}" for i in inputs]
    if ARGS.device.split("[")[0] == "cpu":
        cmd.append(f"--cpu-threads={ARGS.threads}")
    if ARGS.no_attention:
        cmd.append("--no-attention")
    return cmd


def run_kiln(cmd):
    """Runs a kiln command; a timeout reads as a failure with its own message."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=ARGS.timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 1, "", f"timed out after {ARGS.timeout:g} s (--timeout)")


def kiln_outputs(kir, inputs, count, folder):
    """Runs kiln once; returns its outputs, or an error string."""
    outs = [os.path.join(folder, f"out{i}.npy") for i in range(count)]
    r = run_kiln(kiln_cmd("run", kir, inputs) + [f"--output=@{o}" for o in outs])
    if r.returncode != 0:
        return f"kiln run failed:\n{r.stderr.strip()}"
    return [np.load(o) for o in outs]


def kiln_median_ms(kir, inputs):
    """Times kiln with `kiln bench`; returns the median in ms, or an error string."""
    cmd = kiln_cmd("bench", kir, inputs) + [f"--repetitions={ARGS.repetitions}",
                                            f"--warmup={ARGS.warmup}",
                                            f"--warmup-ms={ARGS.warmup_ms}"]
    r = run_kiln(cmd)
    m = re.search(r"^@main: median ([0-9.]+) ms", r.stdout, re.M)
    if r.returncode != 0 or not m:
        return f"kiln bench failed:\n{r.stderr.strip() or r.stdout.strip()}"
    return float(m.group(1))


def synced(fn):
    """fn, followed by waiting for the GPU when the reference runs there (--reference=cuda)."""
    if ARGS.reference != "cuda":
        return fn
    import torch

    def call():
        r = fn()
        torch.cuda.synchronize()
        return r
    return call


def torch_device():
    return "cuda" if ARGS.reference == "cuda" else "cpu"


def reference_name(torch=None):
    if ARGS.reference == "cuda":
        return f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()} (cuBLAS)"
    return None


def reference_median_ms(fn):
    start = time.perf_counter()
    calls = 0
    while calls < ARGS.warmup or (time.perf_counter() - start) * 1e3 < ARGS.warmup_ms:
        fn()
        calls += 1
    times = []
    for _ in range(ARGS.repetitions):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    # kiln bench's median: the element at round(0.5 * (n - 1)), the upper middle for even n.
    times.sort()
    return times[int(0.5 * (len(times) - 1) + 0.5)] * 1e3


def relative_error(got, want):
    if got.shape != want.shape:
        return math.inf
    scale = float(np.abs(want).max()) or 1.0
    return float(np.abs(got.astype(np.float64) - want).max()) / scale


def fmt_ms(ms):
    """3 decimals like kiln bench prints, 3 significant digits below 1 ms."""
    return f"{ms:.3f}" if ms >= 1 else f"{ms:.3g}"


class Report:
    def __init__(self):
        self.failures = []
        self.checked = []  # (workload, largest relative error)

    def fail(self, message):
        """Records a failure; it is printed at once on stderr and again at the end."""
        print(f"FAIL {message}", file=sys.stderr, flush=True)
        self.failures.append(message)

    def table(self, title, rows, notes):
        """rows: (name, kiln ms, reference ms), or with a fourth entry, ONNX Runtime's ms
        (None: not timed), which adds the columns `ORT ms` and `kiln/ORT`."""
        ort = any(len(r) > 3 for r in rows)
        print(f"\n### {title}\n")
        print("| workload | kiln ms | reference ms | ratio |" + (" ORT ms | kiln/ORT |" if ort else ""))
        print("|---|---:|---:|---:|" + ("---:|---:|" if ort else ""))
        for row in rows:
            name, kiln_ms, ref_ms = row[:3]
            ok = isinstance(kiln_ms, float)
            ratio = f"{kiln_ms / ref_ms:.2f}" if ok and ref_ms > 0 else "-"
            line = f"| {name} | {f'{kiln_ms:.3f}' if ok else 'error'} | {fmt_ms(ref_ms)} | {ratio} |"
            if ort:
                ort_ms = row[3] if len(row) > 3 else None
                if ort_ms:
                    line += f" {fmt_ms(ort_ms)} | {f'{kiln_ms / ort_ms:.2f}' if ok else '-'} |"
                else:
                    line += " - | - |"
            print(line)
        print()
        for line in notes:
            print(line)
        sys.stdout.flush()

    def run(self, name, kir, inputs, want, folder):
        """Checks and times one workload; returns kiln's median ms or None."""
        if not ARGS.no_check:
            got = kiln_outputs(kir, inputs, len(want), folder)
            if isinstance(got, str):
                self.fail(f"{name}: {got}")
                return None
            errors = [relative_error(g, w) for g, w in zip(got, want)]
            worst = max(errors)
            self.checked.append((name, worst))
            if not worst <= TOLERANCE:
                self.fail(f"{name}: kiln differs from the reference, relative error "
                                     f"{worst:.3g} > {TOLERANCE:g} (output shapes "
                                     f"{[g.shape for g in got]} vs {[w.shape for w in want]})")
        ms = kiln_median_ms(kir, inputs)
        if isinstance(ms, str):
            self.fail(f"{name}: {ms}")
            return None
        return ms

    def check_line(self):
        if ARGS.no_check:
            return "Numerics: not checked (--no-check)."
        if not self.checked:
            return ""
        worst = max(e for _, e in self.checked)
        bad = sum(1 for _, e in self.checked if not e <= TOLERANCE)
        return (f"Numerics: {len(self.checked) - bad} of {len(self.checked)} workloads match the reference "
                f"(max |kiln - reference| / max |reference| <= {TOLERANCE:g} per output; "
                f"largest {worst:.2g}).")


# ---- GEMM ---------------------------------------------------------------------------------

def blas_library():
    """The BLAS shared object numpy loaded, and a way to set its threads."""
    np.ones((2, 2), np.float32) @ np.ones((2, 2), np.float32)
    paths = {line.split()[-1] for line in open("/proc/self/maps") if "/" in line}
    libs = sorted(p for p in paths if "blas" in os.path.basename(p))
    return libs[0] if libs else "unknown"


def set_openblas_threads(lib):
    try:
        import ctypes
        ctypes.CDLL(lib).openblas_set_num_threads(ARGS.threads)
        return True
    except (OSError, AttributeError):
        return False


def gemm_reference(a, b, f16):
    """The timed reference call: numpy on the CPU, or PyTorch on the GPU (--reference=cuda;
    in f16 for the f16 GEMMs, TF32 off)."""
    if ARGS.reference != "cuda":
        return lambda: a @ b
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    dt = torch.float16 if f16 else torch.float32
    ta, tb = torch.from_numpy(a).to("cuda", dt), torch.from_numpy(b).to("cuda", dt)
    return synced(lambda: torch.matmul(ta, tb))


def bench_gemm(report, tmp, quick):
    workloads = selected(gemm_workloads(quick, ARGS.gpu))
    if not workloads:
        return
    rng = np.random.default_rng(0)
    lib = blas_library()
    set_openblas_threads(lib)
    rows = []
    for i, (name, m, k, n, dt) in enumerate(workloads):
        folder = os.path.join(tmp, f"gemm{i}")
        os.makedirs(folder, exist_ok=True)
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32) / np.float32(math.sqrt(k))
        all16 = dt == "f16 all"
        if all16:
            a = a.astype(np.float16).astype(np.float32)
        if dt.startswith("f16"):
            stored, st_type = b.astype(np.float16), "F16"
            b = stored.astype(np.float32)
        elif dt == "bf16":
            stored, st_type = bf16_bits(b), "BF16"
            b = bf16_to_f32(stored)
        elif dt == "i8":
            # Symmetric per column: b = q * scale[n], q in [-127, 127].
            scale = (np.abs(b).max(axis=0) / np.float32(127)).astype(np.float32)
            stored, st_type = np.clip(np.rint(b / scale), -127, 127).astype(np.int8), "I8"
            b = stored.astype(np.float32) * scale
        else:
            stored, st_type = b, "F32"
        tensors = {"b": (st_type, stored)}
        if dt == "i8":
            tensors["s"] = ("F32", scale)
        save_safetensors(os.path.join(folder, "w.safetensors"), tensors)
        np.save(os.path.join(folder, "a.npy"), a.astype(np.float16) if all16 else a)
        kb = Kir()
        w = kb.weight("b", [k, n], "f16" if all16 else dt, "w.safetensors")
        if dt not in ("f32", "f16 all"):
            w = kb.op("b32", f"cast {w} {{to = f32}}", [k, n])
        if dt == "i8":
            s = kb.weight("s", [n], "f32", "w.safetensors")
            w = kb.op("bs", f"mul {w}, {s}", [k, n])
        elem = "f16" if all16 else "f32"
        c = kb.op("c", f"matmul %a, {w}", [m, n], elem)
        kir = os.path.join(folder, "gemm.kir")
        with open(kir, "w") as f:
            f.write(kb.text([("a", [m, k], elem)], [(c, [m, n], elem)]))
        want = a @ b
        ref_ms = reference_median_ms(gemm_reference(a, b, all16))
        kiln_ms = report.run(name, kir, [os.path.join(folder, "a.npy")], [want], folder)
        rows.append((name, kiln_ms, ref_ms))
        if not ARGS.keep:
            shutil.rmtree(folder)
    if ARGS.reference == "cuda":
        import torch
        reference = (f"Reference: {reference_name(torch)}, f32 without TF32 (f16 for the f16 "
                     "GEMMs); for f16/bf16/i8 weights it multiplies by B converted to f32 (and "
                     "scaled) once before timing, while kiln widens B in the graph on every call.")
    else:
        reference = (f"Reference: numpy {np.__version__} matmul through {lib}, {ARGS.threads} "
                     "threads; for f16/bf16/i8 weights numpy multiplies by B.astype(float32) (times "
                     "the i8 scales), converted once before timing, while kiln widens B in the "
                     "graph on every call"
                     + ("; the f16 GEMMs are timed in f32." if ARGS.gpu else "."))
    report.table("GEMM (C = A x B, A input, B weight; f32 unless named f16)", rows, [
        "ratio = kiln ms / reference ms (below 1: kiln is faster).", reference])


# ---- elementwise ----------------------------------------------------------------------------

def bench_elementwise(report, tmp, quick):
    workloads = selected(elementwise_workloads(quick))
    if not workloads:
        return
    import torch
    torch.set_num_threads(ARGS.threads)
    rng = np.random.default_rng(0)
    rows = []
    for i, (name, n, op, fn, kind) in enumerate(workloads):
        folder = os.path.join(tmp, f"elementwise{i}")
        os.makedirs(folder, exist_ok=True)
        shape = [n // 1024, 1024] if kind == "rows" else [n]
        x = rng.standard_normal(shape, dtype=np.float32) * np.float32(3)
        if kind == "positive":
            x = np.abs(x) + np.float32(0.01)
        np.save(os.path.join(folder, "x.npy"), x)
        kb = Kir()
        y = kb.op("y", op, shape)
        kir = os.path.join(folder, "elementwise.kir")
        with open(kir, "w") as f:
            f.write(kb.text([("x", shape)], [(y, shape)]))
        xt = torch.from_numpy(x).to(torch_device())
        want = fn(torch, xt).cpu().numpy()
        ref_ms = reference_median_ms(synced(lambda: fn(torch, xt)))
        kiln_ms = report.run(name, kir, [os.path.join(folder, "x.npy")], [want], folder)
        rows.append((name, kiln_ms, ref_ms))
        if not ARGS.keep:
            shutil.rmtree(folder)
    report.table("Elementwise transcendental functions (one op over f32 data)", rows, [
        "ratio = kiln ms / reference ms (below 1: kiln is faster).",
        f"Reference: {reference_name(torch) or f'PyTorch {torch.__version__} CPU, {ARGS.threads} threads'} "
        "(f32 arithmetic, vectorized). kiln computes in f64 and rounds once (docs/cpu.md, "
        "\"Inline math\"); its time includes copying the input in and the result out."])


# ---- decoder layer ------------------------------------------------------------------------

MATRICES = ("wq", "wk", "wv", "wo", "wg", "wu", "wd")


def decoder_weights(layer, rng):
    """(values, stored): the weights as f32 arrays, and as the safetensors file stores them
    (name -> (dtype, array)). With bf16 weights the seven matrices are rounded to bf16 and
    their values are the rounded ones, so every engine multiplies by the same numbers; the
    RMSNorm gains stay f32."""
    h, kvd, f = layer.hidden, layer.kv_heads * layer.head_dim, layer.ffn
    shapes = {"wq": (h, h), "wk": (h, kvd), "wv": (h, kvd), "wo": (h, h),
              "wg": (h, f), "wu": (h, f), "wd": (f, h)}
    values, stored = {}, {}
    for name, (fan_in, fan_out) in shapes.items():
        w = rng.standard_normal((fan_in, fan_out), dtype=np.float32) / np.float32(math.sqrt(fan_in))
        if layer.dtype == "bf16":
            bits = bf16_bits(w)
            w, stored[name] = bf16_to_f32(bits), ("BF16", bits)
        else:
            stored[name] = ("F32", w)
        values[name] = w
    for name in ("g1", "g2"):
        values[name] = (1 + 0.1 * rng.standard_normal(h)).astype(np.float32)
        stored[name] = ("F32", values[name])
    return values, stored


def rotary_tables(layer, positions):
    """cos and sin of shape [len(positions), head_dim], Llama's (half, half) layout."""
    d = layer.head_dim
    inv_freq = 1.0 / (layer.theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    freqs = np.outer(np.asarray(positions, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def decoder_kir(layer, t, past, cache=False):
    """The layer in kiln IR: x [t, hidden], cos/sin [t, head_dim], and for a decode the
    past K and V [kv_heads, past, head_dim]; returns y [t, hidden] and this step's K
    (after rotary) and V [kv_heads, t, head_dim]. With `cache` (t = 1): K and V caches
    [kv_heads, past + 1, head_dim], donated to results 1 and 2, this step's index tuples
    (head, pos) and pos; this step's K/V are scattered into the caches at pos, and the
    attention covers positions 0 .. pos of the cache."""
    h, nh, nkv, d, f = layer.hidden, layer.heads, layer.kv_heads, layer.head_dim, layer.ffn
    g = nh // nkv
    s = t + past
    k = Kir()
    w = {}
    for name, shape in [("wq", [h, h]), ("wk", [h, nkv * d]), ("wv", [h, nkv * d]), ("wo", [h, h]),
                        ("wg", [h, f]), ("wu", [h, f]), ("wd", [f, h]), ("g1", [h]), ("g2", [h])]:
        elem = layer.dtype if name in MATRICES else "f32"
        w[name] = k.weight(name, shape, elem, layer.file)
        if elem != "f32":
            # Widened where it is used: kiln's matmul converts the weight as it packs it.
            w[name] = k.op(f"{name}32", f"cast {w[name]} {{to = f32}}", shape)
    k.op("eps", f"constant {{value = dense<{layer.eps!r}> : tensor<f32>}}", [])
    k.op("scale", f"constant {{value = dense<{1 / math.sqrt(d)!r}> : tensor<f32>}}", [])

    def rmsnorm(p, x, gain):
        k.op(f"{p}sq", f"mul {x}, {x}", [t, h])
        k.op(f"{p}ms", f"reduce_mean %{p}sq {{axes = [1], keepdims = 1}}", [t, 1])
        k.op(f"{p}e", f"add %{p}ms, %eps", [t, 1])
        k.op(f"{p}r", f"rsqrt %{p}e", [t, 1])
        k.op(f"{p}n", f"mul {x}, %{p}r", [t, h])
        return k.op(f"{p}", f"mul %{p}n, {gain}", [t, h])

    def heads(p, x, n):
        """[t, n*d] -> [n, t, d] with rotary applied when p is q or k."""
        k.op(f"{p}3", f"reshape {x}", [t, n, d])
        xt = k.op(f"{p}t", f"transpose %{p}3 {{perm = [1, 0, 2]}}", [n, t, d])
        if p == "v":
            return xt
        half = d // 2
        k.lines.append(f"  %{p}1, %{p}2 = split {xt} {{axis = 2, sizes = [{half}, {half}]}} : "
                       f"{ttype([n, t, half])}, {ttype([n, t, half])}")
        k.op(f"{p}n2", f"neg %{p}2", [n, t, half])
        k.op(f"{p}rh", f"concat %{p}n2, %{p}1 {{axis = 2}}", [n, t, d])
        k.op(f"{p}c", f"mul {xt}, %cos", [n, t, d])
        k.op(f"{p}s", f"mul %{p}rh, %sin", [n, t, d])
        return k.op(f"{p}r", f"add %{p}c, %{p}s", [n, t, d])

    hn = rmsnorm("h", "%x", "%g1")
    q = heads("q", k.op("q", f"matmul {hn}, {w['wq']}", [t, h]), nh)
    kn = heads("k", k.op("k", f"matmul {hn}, {w['wk']}", [t, nkv * d]), nkv)
    vn = heads("v", k.op("v", f"matmul {hn}, {w['wv']}", [t, nkv * d]), nkv)
    keys, values = kn, vn
    if cache:
        keys = k.op("kall", f"scatter_nd %cache_k, %idx, {kn}", [nkv, s, d])
        values = k.op("vall", f"scatter_nd %cache_v, %idx, {vn}", [nkv, s, d])
    elif past:
        keys = k.op("kall", f"concat %past_k, {kn} {{axis = 1}}", [nkv, s, d])
        values = k.op("vall", f"concat %past_v, {vn} {{axis = 1}}", [nkv, s, d])
    # Grouped-query attention without copying K/V per query head: query heads
    # [kv_heads, group, t, d] against keys [kv_heads, 1, d, s] (batch dims broadcast).
    k.op("q4", f"reshape {q}", [nkv, g, t, d])
    k.op("kT", f"transpose {keys} {{perm = [0, 2, 1]}}", [nkv, d, s])
    k.op("kT4", "reshape %kT", [nkv, 1, d, s])
    k.op("sc", "matmul %q4, %kT4", [nkv, g, t, s])
    scores = k.op("ss", "mul %sc, %scale", [nkv, g, t, s])
    if cache:
        # Positions after pos are empty.
        k.op("col", "iota {axis = 1}", [1, s], "i64")
        k.op("future", "gt %col, %pos", [1, s], "i1")
        k.op("ninf", "constant {value = dense<-inf> : tensor<f32>}", [])
        scores = k.op("sm", f"select %future, %ninf, {scores}", [nkv, g, t, s])
    elif t > 1:
        # Causal mask: query i (at position past + i) sees keys 0 .. past + i.
        k.op("row", "iota {axis = 0}", [t, s], "i64")
        k.op("col", "iota {axis = 1}", [t, s], "i64")
        if past:
            k.op("pastn", f"constant {{value = dense<{past}> : tensor<i64>}}", [], "i64")
            k.op("rowp", "add %row, %pastn", [t, s], "i64")
            k.op("future", "gt %col, %rowp", [t, s], "i1")
        else:
            k.op("future", "gt %col, %row", [t, s], "i1")
        k.op("ninf", "constant {value = dense<-inf> : tensor<f32>}", [])
        scores = k.op("sm", f"select %future, %ninf, {scores}", [nkv, g, t, s])
    k.op("p", f"softmax {scores} {{axis = -1}}", [nkv, g, t, s])
    k.op("v4", f"reshape {values}", [nkv, 1, s, d])
    k.op("att", "matmul %p, %v4", [nkv, g, t, d])
    k.op("att3", "reshape %att", [nh, t, d])
    k.op("attt", "transpose %att3 {perm = [1, 0, 2]}", [t, nh, d])
    k.op("att2", "reshape %attt", [t, h])
    k.op("o", f"matmul %att2, {w['wo']}", [t, h])
    x2 = k.op("x2", "add %x, %o", [t, h])
    mn = rmsnorm("m", x2, "%g2")
    k.op("gate", f"matmul {mn}, {w['wg']}", [t, f])
    k.op("up", f"matmul {mn}, {w['wu']}", [t, f])
    k.op("act", "silu %gate", [t, f])
    k.op("gu", "mul %act, %up", [t, f])
    k.op("down", f"matmul %gu, {w['wd']}", [t, h])
    y = k.op("y", f"add {x2}, %down", [t, h])
    args = [("x", [t, h]), ("cos", [t, d]), ("sin", [t, d])]
    if cache:
        args += [("cache_k", [nkv, s, d], "f32", " donate 1"),
                 ("cache_v", [nkv, s, d], "f32", " donate 2"),
                 ("idx", [nkv, 1, 2], "i64"), ("pos", [], "i64")]
        return k.text(args, [(y, [t, h]), (keys, [nkv, s, d]), (values, [nkv, s, d])])
    if past:
        args += [("past_k", [nkv, past, d]), ("past_v", [nkv, past, d])]
    return k.text(args, [(y, [t, h]), (kn, [nkv, t, d]), (vn, [nkv, t, d])])


class TorchLayer:
    """The same layer in PyTorch, written as Hugging Face's eager LlamaDecoderLayer
    computes it: nn.Linear weights ([out, in], F.linear), repeat_kv for the KV heads, an
    additive causal mask built per call."""

    def __init__(self, layer, weights, device="cpu", stored=False, sdpa=False):
        """weights: f32 arrays. stored: keep the matrices in the layer's weight type
        (bf16) and widen them to f32 in every product, as exported to ONNX for ORT; by
        default they are f32 tensors (of the same rounded values), PyTorch CPU's fastest
        form for f32 activations. sdpa: attention through
        F.scaled_dot_product_attention (PyTorch 2.x: its fused kernels on a GPU, grouped KV
        heads without repeat_kv) instead of the eager matmul/softmax/matmul."""
        import torch
        self.torch, self.layer = torch, layer
        self.sdpa = sdpa and hasattr(torch.nn.functional, "scaled_dot_product_attention")
        self.w = {n: torch.from_numpy(np.ascontiguousarray(w.T if w.ndim == 2 else w)).to(device)
                  for n, w in weights.items()}
        if stored and layer.dtype == "bf16":
            self.w.update({n: self.w[n].to(torch.bfloat16) for n in MATRICES})

    def linear(self, x, name):
        w = self.w[name]
        return self.torch.nn.functional.linear(x, w if w.dtype == x.dtype else w.float())

    def rmsnorm(self, x, gain):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * self.torch.rsqrt(var + self.layer.eps) * gain

    def cached(self, x, cos, sin, cache_k, cache_v, idx, pos):
        """A decode step with a static cache: this step's K/V written into the caches at
        pos in place (as a static-cache decoder does), attention over positions 0 .. pos."""
        return self(x, cos, sin, cache=(cache_k, cache_v, int(pos)))

    def __call__(self, x, cos, sin, past_k=None, past_v=None, cache=None):
        torch, L, w = self.torch, self.layer, self.w
        F = torch.nn.functional
        t = x.shape[0]
        g = L.heads // L.kv_heads
        hn = self.rmsnorm(x, w["g1"])
        q = self.linear(hn, "wq").view(t, L.heads, L.head_dim).transpose(0, 1)
        k = self.linear(hn, "wk").view(t, L.kv_heads, L.head_dim).transpose(0, 1)
        v = self.linear(hn, "wv").view(t, L.kv_heads, L.head_dim).transpose(0, 1)

        def rot(z):
            half = z.shape[-1] // 2
            return z * cos + torch.cat((-z[..., half:], z[..., :half]), dim=-1) * sin

        q, k = rot(q), rot(k)
        keys, values = k, v
        if cache is not None:
            keys, values, pos = cache
            keys[:, pos] = k[:, 0]
            values[:, pos] = v[:, 0]
        elif past_k is not None:
            keys, values = torch.cat((past_k, k), dim=1), torch.cat((past_v, v), dim=1)
        s = keys.shape[1]
        new_k, new_v = (keys, values) if cache is not None else (k, v)
        if self.sdpa:
            att = self.sdpa_attention(q, keys, values, t, s, g, cache)
            return self.finish(x, att, t), new_k, new_v
        keys = keys.repeat_interleave(g, dim=0)
        values = values.repeat_interleave(g, dim=0)
        scores = torch.matmul(q, keys.transpose(1, 2)) / math.sqrt(L.head_dim)
        if cache is not None:
            scores[..., cache[2] + 1:] = float("-inf")
        elif t > 1:
            mask = torch.full((t, s), float("-inf"), device=x.device).triu(s - t + 1)
            scores = scores + mask
        p = torch.softmax(scores, dim=-1)
        return self.finish(x, torch.matmul(p, values), t), new_k, new_v

    def sdpa_attention(self, q, keys, values, t, s, g, cache):
        """softmax(q k^T / sqrt(d) + causal mask) v by scaled_dot_product_attention: causal
        for a prefill (t = s), no mask for a decode over all of its keys, positions up to
        pos for the static cache."""
        torch = self.torch
        F = torch.nn.functional
        mask, causal = None, False
        if cache is not None:
            mask = (torch.arange(s, device=q.device) <= cache[2]).view(1, 1, s)
        elif t > 1:
            if t == s:
                causal = True
            else:
                mask = torch.ones((t, s), dtype=torch.bool, device=q.device).tril(s - t)
        try:
            return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                                  is_causal=causal, enable_gqa=True)
        except TypeError:  # PyTorch before 2.5: no enable_gqa
            return F.scaled_dot_product_attention(q, keys.repeat_interleave(g, dim=0),
                                                  values.repeat_interleave(g, dim=0),
                                                  attn_mask=mask, is_causal=causal)

    def finish(self, x, att, t):
        """The attention heads [heads, t, d] through the output projection, the residual
        and the MLP block."""
        F, w = self.torch.nn.functional, self.w
        att = att.transpose(0, 1).reshape(t, self.layer.hidden)
        x2 = x + self.linear(att, "wo")
        mn = self.rmsnorm(x2, w["g2"])
        return x2 + self.linear(F.silu(self.linear(mn, "wg")) * self.linear(mn, "wu"), "wd")


ORT_DIR = os.path.join(HERE, ".ort")


def ort_available():
    """ONNX Runtime's CPU library (onnxruntime-node in bench/.ort, a benchmark-only
    dependency: `npm install --ignore-scripts onnxruntime-node` there) and Node.js."""
    return (not ARGS.gpu and shutil.which("node") is not None
            and os.path.isdir(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node")))


def ort_decoder_ms(layer, exported, names, tensors, want, tmp, tag):
    """The PyTorch layer `exported` (TorchLayer with stored=True) exported to ONNX, its
    weights as initializers in their stored type, timed on ONNX Runtime's CPU provider with
    the same threads, its outputs checked against `want`: (median ms, None) or (None, reason).
    bf16 weights are the module's buffers, so that the tracer keeps them as bf16 initializers
    and records their widening as a Cast (a captured tensor's .float() would be traced as an
    f32 constant), and the exporter's constant folding is off, so that it does not fold the
    Cast; ORT may fold it when it creates the session."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for n, w in exported.w.items():
                if w.dtype != torch.float32:
                    self.register_buffer(n, w)  # the same tensor `exported` reads

        def forward(self, *xs):
            return exported(*xs)

    path = os.path.join(tmp, f"{tag}.onnx")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python branches over shapes
        torch.onnx.export(Wrapped(), tuple(tensors), path, opset_version=14, input_names=names,
                          output_names=["y", "k", "v"],
                          do_constant_folding=layer.dtype == "f32")
    spec = []
    for n, t in zip(names, tensors):
        raw = os.path.join(tmp, f"{tag}_{n}.raw")
        a = t.cpu().numpy()
        a.tofile(raw)
        spec.append({"name": n, "raw": raw, "dims": list(a.shape),
                     "dtype": "int64" if a.dtype == np.int64 else "float32"})
    spec_path = os.path.join(tmp, f"{tag}_inputs.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    out_prefix = os.path.join(tmp, f"{tag}_ort_")
    cmd = ["node", os.path.join(HERE, "ort_bench.js"), path, spec_path, str(ARGS.threads),
           str(ARGS.warmup), str(ARGS.repetitions), out_prefix]
    env = dict(os.environ, NODE_PATH=os.path.join(ORT_DIR, "node_modules"))
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=ARGS.timeout)
    except subprocess.TimeoutExpired:
        return None, "timed out"
    finally:
        os.remove(path)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"
    if not ARGS.no_check:
        for n, w in zip(("y", "k", "v"), want):
            got = np.fromfile(out_prefix + n + ".raw", dtype=np.float32)
            err = relative_error(got.reshape(w.shape) if got.size == w.size else got, w)
            if not err <= TOLERANCE:
                return None, f"output {n} differs from PyTorch, relative error {err:.3g} > {TOLERANCE:g}"
    return json.loads(r.stdout.strip().splitlines()[-1])["median_ms"], None


def read_bandwidth_gbs(quick):
    """Memory read bandwidth in GB/s: the best of 5 sums over a 1 GiB f32 array (64 MiB with
    --quick), by numpy split over the threads and by PyTorch with the same threads (its
    reduction reads faster than numpy's on the 2-core machine: 26.7 against 22.2 GB/s)."""
    from concurrent.futures import ThreadPoolExecutor
    import torch
    a = np.ones((64 if quick else 1024) << 18, dtype=np.float32)
    parts, t = np.array_split(a, ARGS.threads), torch.from_numpy(a)
    best = math.inf
    with ThreadPoolExecutor(ARGS.threads) as pool:
        for fn in (lambda: list(pool.map(np.sum, parts)), t.sum):
            for _ in range(5):
                start = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - start)
    return a.nbytes / best / 1e9


def bench_layer(report, tmp, layer):
    """Checks and times one layer's workloads; prints its table and returns
    {(tokens, past): (kiln ms, PyTorch ms, ORT ms)} for the summary (not donated-cache rows)."""
    workloads = selected(decoder_workloads(layer))
    if not workloads:
        return {}
    import torch
    torch.set_num_threads(ARGS.threads)
    rng = np.random.default_rng(1)
    weights, stored = decoder_weights(layer, rng)
    save_safetensors(os.path.join(tmp, layer.file), stored)
    del stored
    ref = TorchLayer(layer, weights, torch_device(), sdpa=ARGS.reference == "cuda")
    use_ort = ort_available()
    exported = TorchLayer(layer, weights, stored=True) if use_ort else None
    del weights
    rows, summary = [], {}
    for i, (name, t, past, cache) in enumerate(workloads):
        tag = f"{layer.kind}_{i}"
        full = f"{name} ({layer.name})"
        x = rng.standard_normal((t, layer.hidden), dtype=np.float32)
        cos, sin = rotary_tables(layer, range(past, past + t))
        inputs = {"x": x, "cos": cos, "sin": sin}
        if cache:
            shape = (layer.kv_heads, past + 1, layer.head_dim)
            inputs["cache_k"] = rng.standard_normal(shape, dtype=np.float32)
            inputs["cache_v"] = rng.standard_normal(shape, dtype=np.float32)
            inputs["idx"] = np.array([[[h, past]] for h in range(layer.kv_heads)], dtype=np.int64)
            inputs["pos"] = np.array(past, dtype=np.int64)
        elif past:
            shape = (layer.kv_heads, past, layer.head_dim)
            inputs["past_k"] = rng.standard_normal(shape, dtype=np.float32)
            inputs["past_v"] = rng.standard_normal(shape, dtype=np.float32)
        files = []
        for n, v in inputs.items():
            files.append(os.path.join(tmp, f"{tag}_{n}.npy"))
            np.save(files[-1], v)
        kir = os.path.join(tmp, f"{tag}.kir")
        with open(kir, "w") as f:
            f.write(decoder_kir(layer, t, past, cache))
        tin = [torch.from_numpy(v.copy()).to(torch_device()) for v in inputs.values()]
        call = ref.cached if cache else ref
        with torch.no_grad():
            want = [r.cpu().numpy().copy() for r in call(*tin)]
            ref_ms = reference_median_ms(synced(lambda: call(*tin)))
        folder = os.path.join(tmp, f"out_{tag}")
        os.makedirs(folder, exist_ok=True)
        kiln_ms = report.run(full, kir, files, want, folder)
        ort_ms = None
        if use_ort and not cache:  # ONNX has no in-place cache update to export
            ort_ms, why = ort_decoder_ms(layer, exported, list(inputs), tin, want, tmp, tag)
            if why:
                report.fail(f"{full}: ONNX Runtime: {why}")
        rows.append((name, kiln_ms, ref_ms, ort_ms) if use_ort else (name, kiln_ms, ref_ms))
        if not cache:
            summary[(t, past)] = (kiln_ms, ref_ms, ort_ms)
    if not ARGS.keep:
        os.remove(os.path.join(tmp, layer.file))
    weights_note = ("" if layer.dtype == "f32" else
                    f" The seven weight matrices are stored in {layer.dtype} (the gains in f32); "
                    "kiln casts them to f32 in the graph (its GEMMs widen them while packing); "
                    "PyTorch multiplies by f32 copies of the same rounded values, made once "
                    "before timing.")
    report.table(f"Llama decoder layer ({layer.describe()})", rows, [
        "ratio = kiln ms / reference ms (below 1: kiln is faster).",
        f"Reference: the same layer in "
        f"{reference_name(torch) or f'PyTorch {torch.__version__} CPU, {ARGS.threads} threads'} "
        + ("(F.linear, scaled_dot_product_attention with grouped KV heads)" if ref.sdpa else
           "(eager, F.linear, repeat_kv)") + ". Outputs: the layer's output and this step's "
        "K (after rotary) and V; a decode takes the past K/V as inputs. With the KV cache "
        "donated, a decode writes this step's K/V into caches of context + 1 positions in "
        "place (kiln: scatter_nd over donated arguments; PyTorch: index assignment) and "
        "returns the caches." + weights_note,
        "ORT: the same PyTorch layer exported to ONNX (opset 14, weights as initializers"
        + ("" if layer.dtype == "f32" else f" in {layer.dtype}, each widened by a Cast, which "
           "ORT may fold into an f32 initializer when it creates the session")
        + f") on ONNX Runtime's CPU provider (onnxruntime-node), {ARGS.threads} intra-op threads, "
        "graph optimization all, its outputs checked against PyTorch's as kiln's are; not for "
        "the donated-cache rows (ONNX cannot write an input in place)."
        if use_ort else "No ORT column: install onnxruntime-node in bench/.ort."])
    return summary


def bench_decoder(report, tmp, quick):
    chosen = [layer for layer in layers(quick) if selected(decoder_workloads(layer))]
    if not chosen:
        return
    results = [(layer, bench_layer(report, tmp, layer)) for layer in chosen]
    # The roofline's bandwidth is the host's: meaningless for a GPU device's kernels.
    gbs = None if ARGS.gpu else read_bandwidth_gbs(quick)
    layer0 = chosen[0]
    columns = [(t, 0) for t in layer0.prefill]
    columns = [c for pair in zip(columns, [(1, c) for c in layer0.contexts]) for c in pair]
    where = (f"kiln on {ARGS.device}, PyTorch on the GPU, ONNX Runtime CPU" if ARGS.gpu
             else "kiln, PyTorch CPU, ONNX Runtime CPU")
    print(f"\n### Decoder layers, ms per call ({where})\n")
    print("| workload | " + " | ".join(f"prefill{t}" if not p else f"decode{p}" for t, p in columns) + " |")
    print("|---|" + "---:|" * len(columns))

    def cell(ms):
        return fmt_ms(ms) if isinstance(ms, float) else "-"

    notes = []
    for layer, summary in results:
        got = [summary.get(c, (None, None, None)) for c in columns]
        for j, engine in enumerate(("kiln", "PyTorch", "ORT")):
            print(f"| {layer.name} {engine} | " + " | ".join(cell(g[j]) for g in got) + " |")
        best = []
        for k_ms, r_ms, o_ms in got:
            refs = [ms for ms in (r_ms, o_ms) if isinstance(ms, float)]
            best.append(f"{k_ms / min(refs):.2f}" if isinstance(k_ms, float) and refs else "-")
        print(f"| {layer.name} kiln / fastest reference | " + " | ".join(best) + " |")
        if gbs is None:
            continue
        roof = layer.weight_bytes() / (gbs * 1e9) * 1e3
        print(f"| {layer.name} weight roofline | "
              + " | ".join(cell(roof) if p else "-" for _, p in columns) + " |")
        decode = summary.get(columns[-1], (None,))[0]
        notes.append(f"{layer.name}: weights {layer.weight_bytes() / 1e6:.1f} MB, roofline "
                     f"{fmt_ms(roof)} ms" + (f"; kiln's decode at context {columns[-1][1]} is "
                                              f"{decode / roof:.2f}x the roofline"
                                              if isinstance(decode, float) else ""))
    print()
    print("prefillT: T tokens, causal; decodeC: one token at context C (past K/V as inputs). "
          "kiln / fastest reference below 1: kiln is ahead of both. "
          + ("No weight roofline on a GPU device (the bandwidth this script can measure is the "
             "host's)." if gbs is None else
             "Weight roofline: weight bytes "
             f"/ measured read bandwidth, {gbs:.1f} GB/s (the fastest of 5 numpy and 5 PyTorch sums "
             f"over a {64 if quick else 1024} MiB f32 array, {ARGS.threads} threads)."))
    if notes:
        print("; ".join(notes) + ".")
    sys.stdout.flush()


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def device_description():
    """The device's line in `kiln devices`; exits with kiln's reason when it is not there
    (no Vulkan loader or driver, an ordinal beyond the devices)."""
    r = run_kiln([ARGS.kiln, "devices"])
    lines = (r.stdout + r.stderr).splitlines()
    for line in lines:
        if line.split(" ", 1)[0] == ARGS.device_id:
            return line.split(" ", 1)[1].strip()
    have = [line.split(" ", 1)[0] for line in lines if line.startswith(ARGS.kind + "[")]
    why = [line.strip() for line in lines if line.startswith(ARGS.kind + ":")]
    sys.exit(f"run.py: error: kiln has no device {ARGS.device_id} ("
             + (f"it has {', '.join(have)}" if have else why[0] if why
                else f"kiln devices lists no {ARGS.kind} device") + ")")


def main():
    if not os.path.isfile(ARGS.kiln):
        sys.exit(f"run.py: error: no kiln binary at {ARGS.kiln} (build it, or pass --kiln=PATH)")
    groups = [g for g in ("gemm", "decoder", "elementwise") if ARGS.only in (None, g)]
    chosen = (selected(gemm_workloads(ARGS.quick, ARGS.gpu)) if "gemm" in groups else []) + \
        ([w for layer in layers(ARGS.quick) for w in selected(decoder_workloads(layer))]
         if "decoder" in groups else []) + \
        (selected(elementwise_workloads(ARGS.quick)) if "elementwise" in groups else [])
    if not chosen:
        sys.exit(f"run.py: error: no workload matches --match={ARGS.match!r}")
    description = device_description()
    if ARGS.reference == "cuda":
        try:
            import torch
            cuda = torch.cuda.is_available()
        except ImportError:
            cuda = False
        if not cuda:
            sys.exit("run.py: error: --reference=cuda needs PyTorch with a CUDA GPU")
    report = Report()
    where = (f"{ARGS.device_id}: {description}" if ARGS.gpu
             else f"{ARGS.threads} threads")
    print(f"kiln bench: device {ARGS.device}, {where}, {ARGS.repetitions} repetitions "
          f"after {ARGS.warmup} warmup (and at least {ARGS.warmup_ms} ms of them), medians; {cpu_name()} ({os.cpu_count()} cores)"
          f"{'; --quick shapes' if ARGS.quick else ''}")
    tmp = ARGS.keep or tempfile.mkdtemp(prefix="kiln-bench-")
    os.makedirs(tmp, exist_ok=True)
    try:
        if ARGS.only in (None, "gemm"):
            bench_gemm(report, tmp, ARGS.quick)
        if ARGS.only in (None, "decoder"):
            bench_decoder(report, tmp, ARGS.quick)
        if ARGS.only in (None, "elementwise"):
            bench_elementwise(report, tmp, ARGS.quick)
    finally:
        if not ARGS.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print()
    line = report.check_line()
    if line:
        print(line)
    for f in report.failures:
        print(f"FAIL {f}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
