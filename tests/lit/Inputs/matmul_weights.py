#!/usr/bin/env python3
"""Writes an ONNX model with three products by f32 weights (no onnx or numpy needed):

  matmul_weights.py OUT_DIR

OUT_DIR/model.onnx takes x f32 [37, 40] and z f32 [40, 64] and returns
  y1 = MatMul(x, w1)            w1 [40, 64]   (N a multiple of 16 and of 32)
  y2 = Gemm(x, w2, transB = 1)  w2 [96, 40]   (a Linear's [N, K] weight)
  y3 = MatMul(x, w3)            w3 [40, 72]   (N a multiple of neither: a padded last strip)
  y4 = MatMul(x, w4)            w4 [40, 64]   (also read by y5: left as it is)
  y5 = Add(z, w4)
OUT_DIR/in{0,1}.npy hold x and z, OUT_DIR/out{1..5}.npy the results computed in f64.
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
    w4 = f32([rng.uniform(-1, 1) for _ in range(K * 64)])
    z = f32([rng.uniform(-1, 1) for _ in range(K * 64)])
    gemm = node("Gemm", ["x", "w2"], ["y2"]) + field(5, field(1, "transB") + field(3, 1) +
                                                     field(20, 2))
    body = field(1, node("MatMul", ["x", "w1"], ["y1"])) + field(1, gemm)
    body += field(1, node("MatMul", ["x", "w3"], ["y3"]))
    body += field(1, node("MatMul", ["x", "w4"], ["y4"]))
    body += field(1, node("Add", ["z", "w4"], ["y5"]))
    body += field(2, "matmul_weights")
    body += field(5, tensor("w1", 1, [K, 64], struct.pack(f"<{K * 64}f", *w1)))
    body += field(5, tensor("w2", 1, [96, K], struct.pack(f"<{96 * K}f", *w2)))
    body += field(5, tensor("w3", 1, [K, 72], struct.pack(f"<{K * 72}f", *w3)))
    body += field(5, tensor("w4", 1, [K, 64], struct.pack(f"<{K * 64}f", *w4)))
    body += field(11, value_info("x", [M, K]))
    body += field(11, value_info("z", [K, 64]))
    for name, n in (("y1", 64), ("y2", 96), ("y3", 72), ("y4", 64)):
        body += field(12, value_info(name, [M, n]))
    body += field(12, value_info("y5", [K, 64]))
    model = field(1, 7) + field(7, body) + field(8, field(2, 13))
    with open(os.path.join(out, "model.onnx"), "wb") as f:
        f.write(model)
    npy.write(os.path.join(out, "in0.npy"), [M, K], "f32", x)
    npy.write(os.path.join(out, "in1.npy"), [K, 64], "f32", z)
    for i, (w, n, at) in enumerate(((w1, 64, lambda k, j: k * 64 + j),
                                    (w2, 96, lambda k, j: j * K + k),
                                    (w3, 72, lambda k, j: k * 72 + j),
                                    (w4, 64, lambda k, j: k * 64 + j)), 1):
        y = [sum(x[r * K + k] * w[at(k, j)] for k in range(K)) for r in range(M) for j in range(n)]
        npy.write(os.path.join(out, f"out{i}.npy"), [M, n], "f32", y)
    npy.write(os.path.join(out, "out5.npy"), [K, 64], "f32", [a + b for a, b in zip(z, w4)])


if __name__ == "__main__":
    main()
