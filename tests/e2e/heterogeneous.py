#!/usr/bin/env python3
"""Heterogeneous placement end to end: a module placed over two devices of different drivers
(`--device=A --device=B --partition=pipeline:2`, and `--place`) runs with transfers between
them and matches the same module run on ref[0] alone (rtol 1e-3, atol 1e-4); the Llama ONNX
example (examples/onnx/llama) split the same way matches PyTorch's logits.

  --pairs=host    cpu[0]+ref[0], ref[0]+cpu[0] and ref[0]+sim[0] (suite e2e). A pair whose
                  compiler backend this kiln lacks (cpu without LLVM) is skipped with a note.
  --pairs=vulkan  cpu[0]+vulkan[0], vulkan[0]+cpu[0] and ref[0]+vulkan[0] (suite vulkan), with
                  the Khronos validation layer on: any `kiln: vulkan validation` line fails the
                  test. Exit 77 (meson: SKIP) with the reason when this kiln has no vulkan
                  compiler backend or no Vulkan device. VK_DRIVER_FILES is set to lavapipe when
                  neither it nor VK_ICD_FILENAMES is set.

usage: heterogeneous.py --kiln PATH --source-root DIR --pairs=host|vulkan
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

RTOL, ATOL = 1e-3, 1e-4
SKIP = 77
LAVAPIPE = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"

# Two matmul stages with a shared constant (cloned onto both devices by affinity), a
# reduction and an elementwise tail; the batch is symbolic.
MLP = """symbol b in [1, 64]
func @main(%x: tensor<{b}x16xf32>, %w1: tensor<16x32xf32>, %w2: tensor<32x8xf32>) -> (tensor<{b}x8xf32>, tensor<{b}x1xf32>) {
  %scale = constant {value = dense<0.5> : tensor<f32>} : tensor<f32>
  %h = matmul %x, %w1 : tensor<{b}x32xf32>
  %hs = mul %h, %scale : tensor<{b}x32xf32>
  %t = tanh %hs : tensor<{b}x32xf32>
  %o = matmul %t, %w2 : tensor<{b}x8xf32>
  %os = mul %o, %scale : tensor<{b}x8xf32>
  %p = softmax %os {axis = -1} : tensor<{b}x8xf32>
  %m = reduce_max %os {axes = [1], keepdims = 1} : tensor<{b}x1xf32>
  return %p, %m
}
"""

PAIRS = {
    "host": [("cpu[0]", "ref[0]"), ("ref[0]", "cpu[0]"), ("ref[0]", "sim[0]")],
    "vulkan": [("cpu[0]", "vulkan[0]"), ("vulkan[0]", "cpu[0]"), ("ref[0]", "vulkan[0]")],
}


def run(cmd, env=None):
    return subprocess.run(cmd, capture_output=True, encoding="utf-8", errors="replace",
                          timeout=300, env=env)


def validation_lines(stderr):
    return [l for l in stderr.splitlines()
            if l.startswith("kiln: vulkan validation") or "VK_LAYER_KHRONOS_validation is not" in l]


def missing_backend(kiln, device, kir, tmp, env):
    """Why `device` cannot be compiled for (its backend is not in this kiln), else None."""
    r = run([kiln, "compile", kir, f"--device={device}", "-o", os.path.join(tmp, "probe.kmod")], env)
    if r.returncode == 0:
        return None
    text = r.stderr.strip()
    if "no compiler backend" in text or "no CPU backend" in text:
        return text
    return None  # another failure: the pair runs and reports it


def compare(name, got_paths, want, failures):
    for i, (path, w) in enumerate(zip(got_paths, want)):
        g = np.load(path)
        ok = g.shape == w.shape and np.allclose(g, w, rtol=RTOL, atol=ATOL)
        err = float(np.abs(g.astype(np.float64) - w).max()) if g.shape == w.shape else float("inf")
        print(f"{'PASS' if ok else 'FAIL'} {name} output {i} shape={list(w.shape)} largest error {err:.3g}")
        failures += not ok
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--pairs", choices=sorted(PAIRS), required=True)
    args = ap.parse_args()
    env = dict(os.environ)
    if args.pairs == "vulkan":
        if "VK_DRIVER_FILES" not in env and "VK_ICD_FILENAMES" not in env and os.path.exists(LAVAPIPE):
            env["VK_DRIVER_FILES"] = LAVAPIPE
        env.setdefault("KILN_VULKAN_VALIDATION", "1")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        kir = os.path.join(tmp, "mlp.kir")
        with open(kir, "w") as f:
            f.write(MLP)
        if args.pairs == "vulkan":
            r = run([args.kiln, "devices"], env)
            listed = r.stdout + r.stderr
            if "vulkan[0]" not in listed:
                why = [l for l in listed.splitlines() if l.startswith("vulkan")]
                print(f"SKIP: no Vulkan device: {why[0] if why else 'this kiln has no vulkan driver'}")
                return SKIP
            why = missing_backend(args.kiln, "vulkan[0]", kir, tmp, env)
            if why:
                print(f"SKIP: cannot compile for vulkan[0]: {why}")
                return SKIP
        rng = np.random.default_rng(0)
        inputs = {"x": rng.standard_normal((5, 16), dtype=np.float32),
                  "w1": rng.standard_normal((16, 32), dtype=np.float32) / 4,
                  "w2": rng.standard_normal((32, 8), dtype=np.float32) / 4}
        paths = []
        for n, v in inputs.items():
            paths.append(os.path.join(tmp, f"{n}.npy"))
            np.save(paths[-1], v)
        flags = [f"--input=@{p}" for p in paths]

        want_paths = [os.path.join(tmp, f"want{i}.npy") for i in range(2)]
        r = run([args.kiln, "run", kir, "--device=ref[0]"] + flags + [f"--output=@{p}" for p in want_paths], env)
        if r.returncode != 0:
            print(f"FAIL the module on ref[0]: {r.stderr.strip()}")
            return 1
        want = [np.load(p) for p in want_paths]

        llama = os.path.join(args.source_root, "examples", "onnx", "llama")
        ran = 0
        for a, b in PAIRS[args.pairs]:
            skipped = [why for why in (missing_backend(args.kiln, d, kir, tmp, env) for d in (a, b)) if why]
            if skipped:
                print(f"note: {a}+{b} skipped: {skipped[0]}")
                continue
            ran += 1
            placements = [("pipeline:2", ["--partition=pipeline:2"]),
                          # tanh and reduce_max on the second device, the rest on the
                          # first: transfers both ways.
                          ("--place", ["--place=tanh=" + b, "--place=reduce_max=" + b])]
            for label, placement in placements:
                name = f"mlp on {a}+{b} ({label})"
                outs = [os.path.join(tmp, f"out{i}.npy") for i in range(2)]
                cmd = [args.kiln, "run", kir, f"--device={a}", f"--device={b}"] + placement + flags + \
                    [f"--output=@{p}" for p in outs]
                r = run(cmd, env)
                bad = validation_lines(r.stderr)
                if r.returncode != 0 or bad:
                    print(f"FAIL {name}: {r.stderr.strip()}")
                    failures += 1
                    continue
                failures = compare(name, outs, want, failures)
            # The Llama example, split in two stages, against PyTorch.
            name = f"llama on {a}+{b} (pipeline:2)"
            out = os.path.join(tmp, "logits.npy")
            r = run([args.kiln, "run", os.path.join(llama, "model.onnx"), f"--device={a}",
                     f"--device={b}", "--partition=pipeline:2",
                     f"--input=@{os.path.join(llama, 'ids_5.npy')}", f"--output=@{out}"], env)
            if r.returncode != 0 or validation_lines(r.stderr):
                print(f"FAIL {name}: {r.stderr.strip()}")
                failures += 1
                continue
            failures = compare(name, [out], [np.load(os.path.join(llama, "logits_5.npy"))], failures)
        if ran == 0:
            print("SKIP: no pair of devices could be compiled for")
            return SKIP
    print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
