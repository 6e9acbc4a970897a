#!/usr/bin/env python3
"""Writes a QDQ MatMul as PyTorch's fake-quantized export has it (no onnx or numpy needed):

  qdq_matmul.py OUT_DIR

OUT_DIR/model.onnx computes x @ DequantizeLinear(QuantizeLinear(w)) with x f32 [3, 48] and
w an f32 [48, 40] initializer quantized to uint8 per tensor (scale 0.004, zero point 100);
OUT_DIR/in0.npy holds x and OUT_DIR/out0.npy x @ w_dequantized computed in f64 (the f32
dequantized path). w lies within 0.4 steps of its quantized values, so quantizing it has no
ties to round.
"""
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(__file__))
import npy  # noqa: E402

K, N, M = 48, 40, 3
SCALE, ZP = 0.004, 100


def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def field(num, value):
    """A varint (int) or length-delimited (bytes, str) protobuf field."""
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    if isinstance(value, str):
        value = value.encode()
    return varint(num << 3 | 2) + varint(len(value)) + value


def tensor(name, dtype, dims, raw):
    return b"".join(field(1, d) for d in dims) + field(2, dtype) + field(8, name) + field(9, raw)


def value_info(name, dims):
    shape = b"".join(field(1, field(1, d)) for d in dims)
    return field(1, name) + field(2, field(1, field(1, 1) + field(2, shape)))


def node(op, inputs, outputs):
    return (b"".join(field(1, i) for i in inputs) + b"".join(field(2, o) for o in outputs) +
            field(3, op.lower()) + field(4, op))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(7)
    q = [rng.randrange(0, 256) for _ in range(K * N)]
    w = [struct.unpack("<f", struct.pack("<f", ((v - ZP) + rng.uniform(-0.4, 0.4)) * SCALE))[0]
         for v in q]
    x = [rng.uniform(-2, 2) for _ in range(M * K)]
    x = [struct.unpack("<f", struct.pack("<f", v))[0] for v in x]
    body = b""
    for n in (node("QuantizeLinear", ["w", "s", "zp"], ["q"]),
              node("DequantizeLinear", ["q", "s", "zp"], ["dq"]),
              node("MatMul", ["x", "dq"], ["y"])):
        body += field(1, n)
    body += field(2, "qdq_matmul")
    body += field(5, tensor("w", 1, [K, N], struct.pack(f"<{K * N}f", *w)))
    body += field(5, tensor("s", 1, [], struct.pack("<f", SCALE)))
    body += field(5, tensor("zp", 2, [], bytes([ZP])))
    body += field(11, value_info("x", [M, K]))
    body += field(12, value_info("y", [M, N]))
    model = field(1, 7) + field(7, body) + field(8, field(2, 13))
    with open(os.path.join(out, "model.onnx"), "wb") as f:
        f.write(model)
    s32 = struct.unpack("<f", struct.pack("<f", SCALE))[0]
    deq = [(v - ZP) * s32 for v in q]
    y = [sum(x[i * K + k] * deq[k * N + j] for k in range(K)) for i in range(M) for j in range(N)]
    npy.write(os.path.join(out, "in0.npy"), [M, K], "f32", x)
    npy.write(os.path.join(out, "out0.npy"), [M, N], "f32", y)


if __name__ == "__main__":
    main()
