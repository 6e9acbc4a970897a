#!/usr/bin/env python3
"""End-to-end test of the ONNX frontend with PyTorch-exported decoders.

examples/onnx/llama/ (a Llama-style decoder, dynamic `seq`) and examples/onnx/gpt/ (dynamic
`batch` and `seq`, other export paths) hold PyTorch exports and PyTorch's logits at several
shapes (examples/onnx/export_*.py make them). Each model is imported once (`kiln import`
-> .kir + .safetensors) and that module is run at every shape; it is also run straight
from the .onnx (`kiln run model.onnx`). Both must match PyTorch with rtol 1e-3, atol 1e-4.
examples/onnx/kv/ (a decoder step with a KV cache: symbolic slice starts, past length 0)
is imported once with --symbol=past=0:64 and run for several (seq, past) pairs.
Then broken copies of the Llama model (truncated, corrupted) must give `error:` and exit 1,
never a crash.

--device=D runs every model on D (default: kiln's default device). For vulkan[N] the Khronos
validation layer is on (any `kiln: vulkan validation` line fails the run), VK_DRIVER_FILES is
set to lavapipe when neither it nor VK_ICD_FILENAMES is set, and the test exits 77 (meson:
SKIP) with kiln's reason when there is no such device; the broken models run on the default
device only.

usage: onnx_decoder.py --kiln PATH --source-root DIR [--device=D]
"""
import argparse
import glob
import os
import random
import subprocess
import sys
import tempfile

import numpy as np

RTOL, ATOL = 1e-3, 1e-4
SKIP = 77
LAVAPIPE = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"
DEVICE = []  # ["--device=D"] when --device is given


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, encoding="utf-8", errors="replace", timeout=300)
    bad = [l for l in r.stderr.splitlines() if l.startswith("kiln: vulkan validation")]
    if bad and r.returncode == 0:  # kiln exits 1 on them; say so even if it did not
        r.returncode = 1
    return r


def check_model(kiln, source_root, name, result_type, tmp):
    """Imports examples/onnx/NAME once and runs it at every reference shape."""
    model_dir = os.path.join(source_root, "examples", "onnx", name)
    model = os.path.join(model_dir, "model.onnx")
    kir = os.path.join(tmp, f"{name}.kir")
    r = run([kiln, "import", model, "-o", kir])
    if r.returncode != 0:
        print(f"FAIL import {name}:", r.stderr)
        return 1
    failures = 0
    text = open(kir).read()
    if "symbol seq in" not in text or result_type not in text:
        print(f"FAIL import {name}: the dynamic dims are not symbolic ({result_type})")
        failures += 1
    lengths = sorted(int(p.split("_")[-1][:-4]) for p in glob.glob(os.path.join(model_dir, "ids_*.npy")))
    if len(lengths) < 2:
        print(f"FAIL {name}: fewer than two reference shapes")
        return failures + 1
    for t in lengths:
        ids = os.path.join(model_dir, f"ids_{t}.npy")
        want = np.load(os.path.join(model_dir, f"logits_{t}.npy"))
        for source in (kir, model):
            out = os.path.join(tmp, f"out_{name}_{t}.npy")
            r = run([kiln, "run", source, f"--input=@{ids}", f"--output=@{out}"] + DEVICE)
            if r.returncode != 0:
                print(f"FAIL run {name} {os.path.basename(source)} seq={t}:", r.stderr)
                failures += 1
                continue
            got = np.load(out)
            err = float(np.abs(got - want).max())
            ok = got.shape == want.shape and np.allclose(got, want, rtol=RTOL, atol=ATOL)
            print(f"{'PASS' if ok else 'FAIL'} {name} {os.path.basename(source)} "
                  f"shape={list(want.shape)} largest error {err:.3g}")
            failures += not ok
    return failures


def check_kv_cache(kiln, source_root, tmp):
    """examples/onnx/kv: a decoder step with a KV cache (symbols seq and past, past may
    be 0), imported once with --symbol=past=0:64 and run for each (seq, past)."""
    model_dir = os.path.join(source_root, "examples", "onnx", "kv")
    kir = os.path.join(tmp, "kv.kir")
    r = run([kiln, "import", os.path.join(model_dir, "model.onnx"), "--symbol=past=0:64", "-o", kir])
    if r.returncode != 0:
        print("FAIL import kv:", r.stderr)
        return 1
    failures = 0
    cases = sorted({p[len(model_dir) + 5:-4] for p in glob.glob(os.path.join(model_dir, "in0_*.npy"))})
    for case in cases:
        out_dir = os.path.join(tmp, f"kv_{case}")
        r = run([kiln, "run", kir] + [f"--input=@{model_dir}/in{i}_{case}.npy" for i in range(3)]
                + [f"--output-dir={out_dir}"] + DEVICE)
        if r.returncode != 0:
            print(f"FAIL run kv {case}:", r.stderr)
            failures += 1
            continue
        for i in range(3):
            got = np.load(os.path.join(out_dir, f"{i}.npy"))
            want = np.load(os.path.join(model_dir, f"out{i}_{case}.npy"))
            ok = got.shape == want.shape and np.allclose(got, want, rtol=RTOL, atol=ATOL)
            err = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
            print(f"{'PASS' if ok else 'FAIL'} kv seq_past={case} output {i} "
                  f"shape={list(want.shape)} largest error {err:.3g}")
            failures += not ok
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--device")
    args = ap.parse_args()
    if args.device:
        DEVICE.append(f"--device={args.device}")
        if args.device.startswith("vulkan"):
            os.environ.setdefault("KILN_VULKAN_VALIDATION", "1")
            if ("VK_DRIVER_FILES" not in os.environ and "VK_ICD_FILENAMES" not in os.environ
                    and os.path.exists(LAVAPIPE)):
                os.environ["VK_DRIVER_FILES"] = LAVAPIPE
        r = run([args.kiln, "devices"])
        if args.device not in r.stdout and f"{args.device}[0]" not in r.stdout:
            print(f"SKIP: no device {args.device}: {r.stdout.strip()} {r.stderr.strip()}")
            return SKIP
        print(f"device {args.device}")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, sym_type in (("llama", "tensor<1x{seq}x64xf32>"),
                               ("gpt", "tensor<{batch}x{seq}x50xf32>")):
            failures += check_model(args.kiln, args.source_root, name, sym_type, tmp)
        failures += check_kv_cache(args.kiln, args.source_root, tmp)
        model_dir = os.path.join(args.source_root, "examples", "onnx", "llama")
        model = os.path.join(model_dir, "model.onnx")
        lengths = sorted(int(p.split("_")[-1][:-4]) for p in glob.glob(os.path.join(model_dir, "ids_*.npy")))
        # Broken models: a diagnostic naming the file, exit 1.
        data = open(model, "rb").read()
        rng = random.Random(7)
        cases = [("truncated", data[: len(data) // 3]), ("empty", b"")]
        for i in range(20):
            b = bytearray(data)
            for _ in range(8):
                b[rng.randrange(len(b))] = rng.randrange(256)
            cases.append((f"corrupted{i}", bytes(b)))
        ids = os.path.join(model_dir, f"ids_{lengths[0]}.npy")
        for name, blob in cases:
            bad = os.path.join(tmp, "model.onnx")
            open(bad, "wb").write(blob)
            r = run([args.kiln, "run", bad, f"--input=@{ids}"])
            good = r.returncode == 0 or (r.returncode == 1 and "error:" in r.stderr)
            if not good:
                print(f"FAIL broken model {name}: exit {r.returncode}: {r.stderr[-300:]}")
                failures += 1
        print(f"broken models: {len(cases)} checked")
    print("OK" if failures == 0 else f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
