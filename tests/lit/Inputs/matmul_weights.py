#!/usr/bin/env python3
"""Writes an ONNX model with three products by f32 weights (no onnx or numpy needed):

  matmul_weights.py OUT_DIR

OUT_DIR/model.onnx takes x f32 [37, 40] and returns
  y1 = MatMul(x, w1)            w1 [40, 64]   (N a multiple of 16 and of 32)
  y2 = Gemm(x, w2, transB = 1)  w2 [96, 40]   (a Linear's [N, K] weight)
  y3 = MatMul(x, w3)            w3 [40, 72]   (N a multiple of neither: a padded last strip)
OUT_DIR/in0.npy holds x and OUT_DIR/out{1,2,3}.npy the products computed in f64.
"""
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(__file__))
import npy  # noqa: E402
from qdq_matmul import field, node, tensor, value_info  # noqa: E402

M, K = 37, 40


def f32(values):
    return [struct.unpack("<f", struct.pack("<f", v))[0] for v in values]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(11)
    x = f32([rng.uniform(-1, 1) for _ in range(M * K)])
    w1 = f32([rng.uniform(-1, 1) for _ in range(K * 64)])
    w2 = f32([rng.uniform(-1, 1) for _ in range(96 * K)])
    w3 = f32([rng.uniform(-1, 1) for _ in range(K * 72)])
    gemm = node("Gemm", ["x", "w2"], ["y2"]) + field(5, field(1, "transB") + field(3, 1) +
                                                     field(20, 2))
    body = field(1, node("MatMul", ["x", "w1"], ["y1"])) + field(1, gemm)
    body += field(1, node("MatMul", ["x", "w3"], ["y3"]))
    body += field(2, "matmul_weights")
    body += field(5, tensor("w1", 1, [K, 64], struct.pack(f"<{K * 64}f", *w1)))
    body += field(5, tensor("w2", 1, [96, K], struct.pack(f"<{96 * K}f", *w2)))
    body += field(5, tensor("w3", 1, [K, 72], struct.pack(f"<{K * 72}f", *w3)))
    body += field(11, value_info("x", [M, K]))
    for name, n in (("y1", 64), ("y2", 96), ("y3", 72)):
        body += field(12, value_info(name, [M, n]))
    model = field(1, 7) + field(7, body) + field(8, field(2, 13))
    with open(os.path.join(out, "model.onnx"), "wb") as f:
        f.write(model)
    npy.write(os.path.join(out, "in0.npy"), [M, K], "f32", x)
    for i, (w, n, at) in enumerate(((w1, 64, lambda k, j: k * 64 + j),
                                    (w2, 96, lambda k, j: j * K + k),
                                    (w3, 72, lambda k, j: k * 72 + j)), 1):
        y = [sum(x[r * K + k] * w[at(k, j)] for k in range(K)) for r in range(M) for j in range(n)]
        npy.write(os.path.join(out, f"out{i}.npy"), [M, n], "f32", y)


if __name__ == "__main__":
    main()
