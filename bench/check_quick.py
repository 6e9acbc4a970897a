#!/usr/bin/env python3
"""CI check of the benchmark harness: runs `bench/run.py --quick --layer=all` (both decoder
layers at small shapes: the f32 TinyLlama-shaped one and the bf16-weight Llama-3-8B-shaped
one) and checks that it exits 0, prints its four markdown tables with a time and a ratio in
every row and the decoder summary table, and that the numerical check covered every row and
passed.

usage: check_quick.py --kiln PATH [--device ref] [--threads N]
"""
import argparse
import os
import re
import subprocess
import sys

# A row's first four columns; the decoder table may add `ORT ms | kiln/ORT` (numbers, or "-"
# for the donated-cache rows) when ONNX Runtime is installed in bench/.ort.
ROW = re.compile(r"^\| ([a-z][^|]+) \| ([0-9.]+) \| ([0-9.e-]+) \| ([0-9.]+) \|"
                 r"(?: ([0-9.e-]+|-) \| ([0-9.]+|-) \|)?$")
HEADER = "| workload | kiln ms | reference ms | ratio |"
SUMMARY = "| workload | prefill8 | decode8 | prefill16 | decode16 |"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kiln", required=True)
    p.add_argument("--device", default="ref")
    p.add_argument("--threads", default="2")
    a = p.parse_args()
    run_py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run.py")
    r = subprocess.run([sys.executable, run_py, "--quick", "--layer=all", f"--device={a.device}",
                        f"--threads={a.threads}", f"--kiln={a.kiln}"],
                       capture_output=True, text=True, timeout=300)
    print(r.stdout)
    print(r.stderr, file=sys.stderr)
    problems = []
    if r.returncode != 0:
        problems.append(f"run.py exited {r.returncode}")
    lines = r.stdout.splitlines()
    if sum(1 for line in lines if line == HEADER or line == HEADER + " ORT ms | kiln/ORT |") != 4:
        problems.append("expected four tables with the header | workload | kiln ms | reference ms | ratio |")
    if SUMMARY not in lines:
        problems.append(f"expected the decoder summary table with the header {SUMMARY}")
    rows = [m for m in map(ROW.match, lines) if m]
    gemm = [m for m in rows if m.group(1).startswith("gemm ")]
    decoder = [m for m in rows if m.group(1).startswith("decoder ")]
    elementwise = [m for m in rows if m not in gemm and m not in decoder]
    if len(gemm) < 10:
        problems.append(f"expected at least 10 GEMM rows with numbers, got {len(gemm)}")
    if len(decoder) != 12:
        problems.append(f"expected 12 decoder rows (per layer 2 prefill, 2 decode, 2 decode with "
                        f"the KV cache donated) with numbers, got {len(decoder)}")
    if len(elementwise) != 9:
        problems.append(f"expected 9 elementwise rows with numbers, got {len(elementwise)}")
    for m in rows:
        kiln_ms, ref_ms, ratio = (float(m.group(i)) for i in (2, 3, 4))
        # Both times are printed rounded (kiln to 0.001 ms, the reference to 3 digits
        # below 1 ms), the ratio from the unrounded ones, 2 decimals.
        dk, dr = 0.0005, (0.0005 if ref_ms >= 1 else 0.005 * ref_ms)
        lo, hi = max(kiln_ms - dk, 0) / (ref_ms + dr), (kiln_ms + dk) / max(ref_ms - dr, 1e-12)
        if not lo - 0.005 <= ratio <= hi + 0.005:
            problems.append(f"{m.group(1)}: ratio {ratio} is not kiln ms / reference ms")
    n = len(rows)
    if f"Numerics: {n} of {n} workloads match the reference" not in r.stdout:
        problems.append(f"the numerics line does not say all {n} workloads match")
    for problem in problems:
        print(f"FAIL {problem}")
    if not problems:
        print(f"PASS {len(gemm)} GEMM, {len(decoder)} decoder and {len(elementwise)} elementwise "
              "workloads timed and matching")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
