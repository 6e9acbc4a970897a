#!/usr/bin/env python3
"""kiln on real models: eight networks from torchvision and torch.nn (random weights, fixed
seed, batch 1), exported to ONNX, compiled with kiln, checked against PyTorch and timed
against ONNX Runtime (CPU) and PyTorch eager with the same number of threads.

Each model is exported with torch.onnx.export, compiled once with `kiln compile`, run once
with `kiln run` and compared with PyTorch's output (max |kiln - torch| <= TOLERANCE *
max |torch|). Then --rounds interleaved rounds time, in turn, kiln (`kiln bench`, the median
of --repetitions calls; with --baseline, the baseline's too, the two taking turns at going
first), ONNX Runtime (onnxruntime-node driven by bench/ort_bench.js, the same) and PyTorch
(the same, in this process, followed by a quarter-second pause while its OpenMP threads
stop spinning); each column is the median of the rounds' medians. The table:

    | model | kiln ms | ORT ms | PyTorch ms | kiln/ORT |

ONNX Runtime is a benchmark-only dependency: `npm install --ignore-scripts onnxruntime-node` in bench/.ort
(git ignores it); without it the ORT column reads `-`. --quick checks SqueezeNet 1.1 and the
TransformerEncoder against PyTorch only (no timing, no ONNX Runtime): the `bench-models-quick`
test.

usage: models.py [--kiln=PATH] [--baseline=PATH] [--threads=N] [--quick] [--match=TEXT] [--rounds=N]
                 [--repetitions=N] [--warmup=N] [--keep=DIR] [--profile]
Exit status 1 when kiln fails on a model or its output does not match PyTorch.
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ORT_DIR = os.path.join(HERE, ".ort")

# kiln matches PyTorch when max|kiln - torch| <= TOLERANCE * max|torch|: both compute in f32,
# in different orders, through up to ~50 layers.
TOLERANCE = 2e-3


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kiln", default=os.path.join(ROOT, "build", "tools", "kiln"))
    p.add_argument("--baseline", help="another kiln binary (an earlier build), timed in the same "
                   "rounds: adds the columns `baseline ms` and `kiln/baseline`")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads for kiln, ONNX Runtime and PyTorch (default: all cores)")
    p.add_argument("--quick", action="store_true",
                   help="SqueezeNet 1.1 and the TransformerEncoder, checked against PyTorch, untimed")
    p.add_argument("--match", default="", help="only the models whose name contains TEXT")
    p.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (default 3)")
    p.add_argument("--repetitions", type=int, default=5, help="timed calls per round (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per round (default 2)")
    p.add_argument("--keep", help="write the models (.onnx, .kmod, .npy) to DIR and keep them")
    p.add_argument("--profile", action="store_true",
                   help="print `kiln bench --profile` of every model after the table")
    p.add_argument("--timeout", type=float, default=1800,
                   help="seconds one kiln command may take (default 1800)")
    return p.parse_args()


ARGS = None


# ---- the models -------------------------------------------------------------------------

def torchvision_model(name):
    def make():
        import torchvision.models as tvm
        return getattr(tvm, name)(weights=None), image()
    return make


def image():
    return torch.randn(1, 3, 224, 224)


def transformer_encoder():
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024,
                                             batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=4), torch.randn(1, 128, 256)


class Gpt2Decoder(torch.nn.Module):
    """GPT-2 small's shapes: 12 pre-norm layers, d=768, 12 heads, GELU MLP of 3072, causal
    attention, token and position embeddings, a 50257-word head; 64 tokens."""

    def __init__(self, vocab=50257, d=768, heads=12, layers=12, context=64):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, d)
        self.positions = torch.nn.Embedding(context, d)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                                 batch_first=True, norm_first=True)
        self.layers = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        mask = torch.triu(torch.full((context, context), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, ids):
        n = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(n).unsqueeze(0))
        return self.head(self.norm(self.layers(x, mask=self.mask[:n, :n])))


def gpt2_decoder():
    return Gpt2Decoder(), torch.randint(0, 50257, (1, 64))


MODELS = [
    ("ResNet-18", torchvision_model("resnet18")),
    ("SqueezeNet 1.1", torchvision_model("squeezenet1_1")),
    ("MobileNetV3-Small", torchvision_model("mobilenet_v3_small")),
    ("EfficientNet-B0", torchvision_model("efficientnet_b0")),
    ("ConvNeXt-Tiny", torchvision_model("convnext_tiny")),
    ("ViT-B/16", torchvision_model("vit_b_16")),
    ("TransformerEncoder", transformer_encoder),
    ("GPT-2-small decoder", gpt2_decoder),
]
QUICK = ("SqueezeNet 1.1", "TransformerEncoder")


# ---- running them -------------------------------------------------------------------------

def slug(name):
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def run(cmd, timeout=None):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout or ARGS.timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 1, "", f"timed out after {timeout or ARGS.timeout:g} s")


def export(name, make, folder):
    """The model, its input, PyTorch's output and the ONNX file."""
    torch.manual_seed(0)
    model, x = make()
    model.eval()
    with torch.no_grad():
        want = model(x).numpy()
    path = os.path.join(folder, slug(name) + ".onnx")
    # With gradients enabled the transformer layers take their exportable path, not the fused
    # `_transformer_encoder_layer_fwd` fast path, which has no ONNX form.
    with torch.enable_grad():
        torch.onnx.export(model, (x,), path, opset_version=14, input_names=["input"],
                          output_names=["output"], do_constant_folding=True)
    inp = os.path.join(folder, slug(name) + ".input.npy")
    np.save(inp, x.numpy())
    return model, x, want, path, inp


def kiln_threads():
    return [f"--cpu-threads={ARGS.threads}"]


def kiln_compile(onnx_path, kiln=None, suffix=".kmod"):
    kmod = onnx_path[:-5] + suffix
    r = run([kiln or ARGS.kiln, "compile", onnx_path, "-o", kmod])
    if r.returncode != 0:
        return None, f"kiln compile failed:\n{r.stderr.strip()}"
    return kmod, None


def kiln_check(kmod, inp, want, folder):
    out = os.path.join(folder, "kiln_out.npy")
    r = run([ARGS.kiln, "run", kmod, f"--input=@{inp}", f"--output=@{out}"] + kiln_threads())
    if r.returncode != 0:
        return f"kiln run failed:\n{r.stderr.strip()}"
    got = np.load(out)
    if got.shape != want.shape:
        return f"kiln's output has shape {got.shape}, PyTorch's {want.shape}"
    err = float(np.max(np.abs(got.astype(np.float64) - want))) / max(float(np.max(np.abs(want))), 1e-30)
    if not err <= TOLERANCE:
        return f"kiln's output differs from PyTorch's: max error {err:.3g} of max |output| (tolerance {TOLERANCE:g})"
    return None


def kiln_ms(kmod, inp, profile=False, kiln=None):
    cmd = [kiln or ARGS.kiln, "bench", kmod, f"--input=@{inp}", f"--repetitions={ARGS.repetitions}",
           f"--warmup={ARGS.warmup}"] + kiln_threads() + (["--profile"] if profile else [])
    r = run(cmd)
    m = re.search(r"^@main: median ([0-9.]+) ms", r.stdout, re.M)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"kiln bench failed:\n{r.stderr.strip() or r.stdout.strip()}")
    return float(m.group(1)), r.stdout


def ort_available():
    return os.path.isdir(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node")) and shutil.which("node")


def ort_ms(onnx_path, inp):
    x = np.load(inp)
    raw = inp + ".raw"
    x.tofile(raw)
    cmd = ["node", os.path.join(HERE, "ort_bench.js"), onnx_path, raw,
           "int64" if x.dtype == np.int64 else "float32", ",".join(map(str, x.shape)),
           str(ARGS.threads), str(ARGS.warmup), str(ARGS.repetitions)]
    env = dict(os.environ, NODE_PATH=os.path.join(ORT_DIR, "node_modules"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=ARGS.timeout)
    if r.returncode != 0:
        raise RuntimeError(f"ONNX Runtime failed:\n{r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])["median_ms"]


def torch_ms(model, x):
    with torch.no_grad():
        for _ in range(ARGS.warmup):
            model(x)
        times = []
        for _ in range(ARGS.repetitions):
            start = time.perf_counter()
            model(x)
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def fmt(ms):
    if ms is None:
        return "-"
    return f"{ms:,.1f}" if ms >= 10 else f"{ms:.2f}"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    global ARGS
    ARGS = parse_args()
    torch.set_num_threads(ARGS.threads)
    chosen = [(n, m) for n, m in MODELS if ARGS.match.lower() in n.lower()
              and (not ARGS.quick or n in QUICK)]
    folder = ARGS.keep or tempfile.mkdtemp(prefix="kiln-models-")
    os.makedirs(folder, exist_ok=True)
    use_ort = not ARGS.quick and ort_available()
    print(f"# {len(chosen)} models, {ARGS.threads} threads, {cpu_name()}, torch {torch.__version__}"
          + ("" if ARGS.quick else f", {ARGS.rounds} rounds x {ARGS.repetitions} repetitions")
          + ("" if use_ort or ARGS.quick else ", no ONNX Runtime (npm install --ignore-scripts onnxruntime-node in bench/.ort)"))
    failures = []
    ready = []  # (name, model, x, onnx, inp, kmod)
    baselines = {}  # name -> the baseline's kmod
    try:
        for name, make in chosen:
            model, x, want, onnx_path, inp = export(name, make, folder)
            kmod, why = kiln_compile(onnx_path)
            why = why or kiln_check(kmod, inp, want, folder)
            if why:
                failures.append(name)
                print(f"FAIL {name}: {why}")
                continue
            print(f"ok {name}: kiln matches PyTorch")
            if ARGS.baseline and not ARGS.quick:
                base, why = kiln_compile(onnx_path, ARGS.baseline, ".baseline.kmod")
                if why:
                    failures.append(name)
                    print(f"FAIL {name} (baseline): {why}")
                    continue
                baselines[name] = base
            ready.append((name, model, x, onnx_path, inp, kmod))
        sys.stdout.flush()
        if ARGS.quick:
            print(f"Numerics: {len(ready)} of {len(chosen)} models match")
            return 1 if failures else 0

        times = {name: {"kiln": [], "ort": [], "torch": [], "base": []} for name, *_ in ready}
        for r in range(ARGS.rounds):
            for name, model, x, onnx_path, inp, kmod in ready:
                try:
                    # kiln and the baseline take turns at going first in a round.
                    runs = [("kiln", lambda: kiln_ms(kmod, inp)[0])]
                    if name in baselines:
                        runs.append(("base", lambda: kiln_ms(baselines[name], inp, kiln=ARGS.baseline)[0]))
                    for key, run in (runs if r % 2 == 0 else runs[::-1]):
                        times[name][key].append(run())
                    if use_ort:
                        times[name]["ort"].append(ort_ms(onnx_path, inp))
                except RuntimeError as e:
                    print(f"FAIL {name}: {e}")
                    failures.append(name)
                times[name]["torch"].append(torch_ms(model, x))
                # PyTorch's OpenMP threads keep spinning for a while after a call: the next
                # program timed would share the cores with them.
                time.sleep(0.25)
        print()
        base = " baseline ms | kiln/baseline |" if ARGS.baseline else ""
        print("| model | kiln ms | ORT ms | PyTorch ms | kiln/ORT |" + base)
        print("|---|---:|---:|---:|---:|" + ("---:|---:|" if ARGS.baseline else ""))
        for name, *_ in ready:
            med = {k: statistics.median(v) if v else None for k, v in times[name].items()}
            ratio = f"{med['kiln'] / med['ort']:.2f}x" if med["kiln"] and med["ort"] else "-"
            extra = ""
            if ARGS.baseline:
                b = f"{med['kiln'] / med['base']:.2f}x" if med["kiln"] and med["base"] else "-"
                extra = f" {fmt(med['base'])} | {b} |"
            print(f"| {name} | {fmt(med['kiln'])} | {fmt(med['ort'])} | {fmt(med['torch'])} | {ratio} |" + extra)
        if ARGS.profile:
            for name, model, x, onnx_path, inp, kmod in ready:
                print(f"\n## {name}\n")
                print(kiln_ms(kmod, inp, profile=True)[1])
        print(f"\nNumerics: {len(ready)} of {len(chosen)} models match")
        return 1 if failures else 0
    finally:
        if not ARGS.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
