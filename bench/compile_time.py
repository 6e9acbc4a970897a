#!/usr/bin/python3
"""Compile-time benchmark: exports torch.nn models to ONNX (random weights, batch 1) and
prints, per model, `kiln compile`'s cold time (empty kernel cache), warm time (every kernel
in the cache) and peak memory (max RSS from /usr/bin/time -v), with the kernel counts that
--time-passes reports, and ONNX Runtime's session creation for the same file (loading and
optimizing it: what a user waits for before the first run; bench/ort_bench.js, when
onnxruntime-node is installed in bench/.ort). The models: three torch.nn ones defined here,
the eight real models of bench/models.py (torchvision's ResNet-18, SqueezeNet 1.1,
MobileNetV3-Small, EfficientNet-B0, ConvNeXt-Tiny, ViT-B/16, a TransformerEncoder and a
GPT-2-small decoder; --no-real leaves them out) and the repo's example decoders
(examples/onnx/*/model.onnx).

    /usr/bin/python3 bench/compile_time.py [--kiln=build/tools/kiln] [--jobs=N] [--only=NAME]
                                           [--threads=N] [--no-real]

Each compile gets its own KILN_CACHE_DIR under a temporary folder, so the user's cache is
never read or written.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def torch_models():
    import torch
    from torch import nn

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024),
                                     nn.GELU(), nn.Linear(1024, 256), nn.LayerNorm(256))

        def forward(self, x):
            return self.net(x)

    class EncoderLayer(nn.Module):
        """nn.TransformerEncoderLayer's math (post-norm, ReLU), written out: PyTorch's own
        layer takes a fused fast path in eval mode that its ONNX exporter cannot export."""

        def __init__(self, d, heads, ff):
            super().__init__()
            self.heads = heads
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, ff), nn.Linear(ff, d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            a = ((q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5).softmax(-1)
            x = self.ln1(x + self.proj((a @ v).transpose(1, 2).reshape(b, t, d)))
            return self.ln2(x + self.out(torch.relu(self.fc(x))))

    class Encoder(nn.Module):
        """A 4-layer transformer encoder, d=256, 4 heads, feed-forward 1024, sequence 32."""

        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(EncoderLayer(256, 4, 1024) for _ in range(4))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x, mask):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            a = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
            a = a.masked_fill(mask[:t, :t] == 0, float("-inf")).softmax(-1)
            x = x + self.proj((a @ v).transpose(1, 2).reshape(b, t, d))
            return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))

    class Gpt(nn.Module):
        """A GPT-2-shaped decoder: `layers` blocks of width d, tied to a small vocabulary."""

        def __init__(self, layers=6, d=384, heads=6, vocab=2048, seq=64):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
            self.register_buffer("mask", torch.tril(torch.ones(seq, seq)))

        def forward(self, ids):
            t = ids.shape[1]
            x = self.tok(ids) + self.pos(torch.arange(t))
            for blk in self.blocks:
                x = blk(x, self.mask)
            return self.head(self.ln(x))

    return [
        ("mlp", Mlp(), torch.randn(1, 256)),
        ("transformer-encoder-4x256", Encoder(), torch.randn(1, 32, 256)),
        ("gpt-6x384", Gpt(), torch.randint(0, 2048, (1, 32))),
    ]


def export(tmp, only, real):
    """(name, .onnx path, input .npy path or None) of each model whose name contains `only`."""
    import numpy as np
    import torch

    torch.manual_seed(0)
    out = []
    for name, model, x in torch_models():
        if only not in name:
            continue
        path = os.path.join(tmp, name + ".onnx")
        model.eval()
        with torch.no_grad():
            torch.onnx.export(model, (x,), path, opset_version=17, input_names=["x"],
                              output_names=["y"])
        inp = os.path.join(tmp, name + ".input.npy")
        np.save(inp, x.numpy())
        out.append((name, path, inp))
    if real:
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        import models  # bench/models.py: the same exports as the run-time table

        for name, make in models.MODELS:
            if only in name:
                _, _, _, path, inp = models.export(name, make, tmp)
                out.append((name, path, inp))
    for name in ("gpt", "llama", "kv"):
        path = os.path.join(ROOT, "examples", "onnx", name, "model.onnx")
        if os.path.exists(path) and only in "examples/" + name:
            out.append(("examples/" + name, path, None))
    return out


def ort_create_ms(path, inp, threads):
    """ONNX Runtime's session creation time for the model, or None without ONNX Runtime."""
    ort = os.path.join(ROOT, "bench", ".ort", "node_modules")
    if inp is None or not shutil.which("node") or not os.path.isdir(os.path.join(ort, "onnxruntime-node")):
        return None
    import numpy as np

    x = np.load(inp)
    raw = inp + ".raw"
    x.tofile(raw)
    cmd = ["node", os.path.join(ROOT, "bench", "ort_bench.js"), path, raw,
           "int64" if x.dtype == np.int64 else "float32", ",".join(map(str, x.shape)),
           str(threads), "0", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, NODE_PATH=ort))
    if r.returncode != 0:
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])["create_ms"] / 1000


def compile_once(kiln, model, out, cache, jobs):
    env = dict(os.environ, KILN_CACHE_DIR=cache)
    cmd = ["/usr/bin/time", "-v", kiln, "compile", model, "-o", out, "--time-passes"]
    if jobs:
        cmd.append("--jobs=%d" % jobs)
    begin = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - begin
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-3:]
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    counts = {k: int(v) for k, v in re.findall(r"^(kernel[^:\n]*): (\d+)$", r.stderr, re.M)}
    return {"s": seconds, "rss_mb": int(rss.group(1)) / 1024 if rss else 0, "counts": counts}, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "tools", "kiln"))
    ap.add_argument("--jobs", type=int, default=0, help="kiln compile --jobs (0: its default)")
    ap.add_argument("--only", default="", help="models whose name contains this")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="ONNX Runtime's intra-op threads (default: every core)")
    ap.add_argument("--no-real", action="store_true",
                    help="leave out the eight real models of bench/models.py")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kiln-compile-time-")
    try:
        models = export(tmp, args.only, not args.no_real)
        print("%-28s %9s %9s %9s %12s  %-22s %s" % ("model", "cold s", "warm s", "peak MB",
                                                    "kernels", "cache (warm)", "ORT session s"))
        failed = False
        for name, path, inp in models:
            cache = os.path.join(tmp, "cache-" + name.replace("/", "-"))
            out = os.path.join(tmp, "out.kmod")
            cold, err = compile_once(args.kiln, path, out, cache, args.jobs)
            if not cold:
                print("%-28s failed: %s" % (name, " / ".join(err)))
                failed = True
                continue
            warm, err = compile_once(args.kiln, path, out, cache, args.jobs)
            if not warm:
                print("%-28s warm compile failed: %s" % (name, " / ".join(err)))
                failed = True
                continue
            c, w = cold["counts"], warm["counts"]
            ort = ort_create_ms(path, inp, args.threads)
            print("%-28s %9.2f %9.2f %9.0f %5d -> %-4d  %-22s %s" % (
                name, cold["s"], warm["s"], max(cold["rss_mb"], warm["rss_mb"]),
                c.get("kernels before deduplication", 0), c.get("kernels after deduplication", 0),
                "%d hits, %d misses" % (w.get("kernel cache hits", 0),
                                        w.get("kernel cache misses", 0)),
                "-" if ort is None else "%.2f" % ort), flush=True)
        return 1 if failed else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
