#!/usr/bin/env python3
"""Recurrent and quantized PyTorch exports (examples/onnx/export_rnn_quant.py) against
PyTorch's outputs: a bidirectional 2-layer LSTM, a GRU with an initial state, and an MLP and
a CNN with int8 QDQ (QuantizeLinear/DequantizeLinear) weights and uint8 activations, and
boolean-mask indexing, nonzero and unique (results sized by the data), and a loop whose trip
count and condition are run-time data (run on the host side), and one that stacks a list it
appends to (a loop-carried sequence, a scan output of run-time length). Each runs straight from the
.onnx on the reference device and on cpu.

usage: onnx_models.py --kiln PATH --source-root DIR
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np

RTOL, ATOL = 1e-3, 1e-4
MODELS = ["lstm", "gru", "qmlp", "qcnn", "masked", "loop", "scan"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--source-root", required=True)
    args = ap.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            d = os.path.join(args.source_root, "examples", "onnx", name)
            ins = sorted(glob.glob(os.path.join(d, "in*.npy")))
            outs = sorted(glob.glob(os.path.join(d, "out*.npy")))
            for device in ("ref[0]", "cpu[0]"):
                out_dir = os.path.join(tmp, f"{name}_{device[:3]}")
                cmd = [args.kiln, "run", os.path.join(d, "model.onnx"), f"--device={device}",
                       f"--output-dir={out_dir}"] + [f"--input=@{p}" for p in ins]
                r = subprocess.run(cmd, capture_output=True, encoding="utf-8", errors="replace",
                                   timeout=300)
                if r.returncode != 0:
                    print(f"FAIL {name} on {device}: {r.stderr.strip()}")
                    failures += 1
                    continue
                for i, want_path in enumerate(outs):
                    want = np.load(want_path)
                    got = np.load(os.path.join(out_dir, f"{i}.npy"))
                    err = float(np.abs(got.astype(np.float64) - want).max()) if got.shape == want.shape else float("inf")
                    ok = got.shape == want.shape and np.allclose(got, want, rtol=RTOL, atol=ATOL)
                    print(f"{'PASS' if ok else 'FAIL'} {name} on {device} output {i} "
                          f"shape={list(want.shape)} largest error {err:.3g}")
                    failures += not ok
    print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
