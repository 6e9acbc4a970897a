#!/usr/bin/env python3
"""Writes a Llama-style decoder as kiln IR, with its weights and an input.

  decoder.py --blocks N --out DIR

DIR/decoder.kir      @main(%x: 128x32 hidden states) -> logits, N pre-norm blocks:
                     RMSNorm, single-head attention with rotary embeddings and a causal
                     mask, RMSNorm, SwiGLU MLP; then a final norm and an LM head. The
                     rotary tables (cos, sin: 128x32) and the mask are constants shared
                     by every block, as a PyTorch export leaves them.
DIR/weights.safetensors  every block's weights (blocks.B.wq, ...), deterministic values
DIR/x.npy            the input

Only the Python standard library is used, so the test runs wherever lit does.
"""
import argparse
import json
import math
import os
import struct

S, H, F, V = 128, 32, 64, 64  # sequence, hidden, MLP, vocabulary


def values(seed, n, scale):
    # A small deterministic generator (LCG), uniform in [-scale, scale).
    out, state = [], seed * 2654435761 % 2**32 or 1
    for _ in range(n):
        state = (1103515245 * state + 12345) % 2**31
        out.append((state / 2**31 * 2 - 1) * scale)
    return out


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def lit(v):
    v = f32(v)
    if math.isinf(v):
        return "-inf" if v < 0 else "inf"
    return repr(v)


def dense(rows, cols, fn):
    body = ", ".join("[" + ", ".join(lit(fn(r, c)) for c in range(cols)) + "]" for r in range(rows))
    return "dense<[" + body + "]> : tensor<%dx%dxf32>" % (rows, cols)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    shapes = {"g1": [H], "wq": [H, H], "wk": [H, H], "wv": [H, H], "wo": [H, H],
              "g2": [H], "w1": [H, F], "w3": [H, F], "w2": [F, H]}
    tensors = {}
    seed = 1
    for b in range(a.blocks):
        for name, shape in shapes.items():
            n = math.prod(shape)
            scale = 1.0 / math.sqrt(shape[0])
            data = [1.0 + x for x in values(seed, n, 0.1)] if name.startswith("g") else values(seed, n, scale)
            tensors["blocks.%d.%s" % (b, name)] = (shape, data)
            seed += 1
    tensors["norm"] = ([H], [1.0 + x for x in values(seed, H, 0.1)])
    tensors["lm_head"] = ([H, V], values(seed + 1, H * V, 1.0 / math.sqrt(H)))

    # safetensors: 8-byte little-endian header size, JSON header, raw little-endian data.
    header, blobs, offset = {}, [], 0
    for name, (shape, data) in tensors.items():
        blob = struct.pack("<%df" % len(data), *data)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    hjson = json.dumps(header).encode()
    hjson += b" " * (-len(hjson) % 8)
    with open(os.path.join(a.out, "weights.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hjson)) + hjson + b"".join(blobs))

    # npy v1.0 for the input.
    xs = values(999, S * H, 1.0)
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (S, H)
    hdr += " " * (-(10 + len(hdr) + 1) % 64) + "\n"
    with open(os.path.join(a.out, "x.npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        f.write(struct.pack("<%df" % len(xs), *xs))

    t = "tensor<%dx%dxf32>"
    act = t % (S, H)
    lines = []
    for name, (shape, _) in tensors.items():
        ty = "tensor<%sxf32>" % "x".join(map(str, shape))
        lines.append('weight @"%s" : %s = "weights.safetensors"["%s"]' % (name, ty, name))
    lines.append("")
    lines.append("func @main(%%x: %s) -> (%s) {" % (act, t % (S, V)))

    def freq(c):
        return 1.0 / (10000.0 ** ((c % (H // 2)) * 2.0 / H))

    lines.append("  %%cos = constant {value = %s} : %s" % (dense(S, H, lambda r, c: math.cos(r * freq(c))), act))
    lines.append("  %%sin = constant {value = %s} : %s" % (dense(S, H, lambda r, c: math.sin(r * freq(c))), act))
    lines.append("  %%mask = constant {value = %s} : %s" % (dense(S, S, lambda r, c: 0.0 if c <= r else -math.inf), t % (S, S)))
    lines.append("  %eps = constant {value = dense<1.0e-05> : tensor<f32>} : tensor<f32>")
    lines.append("  %%scale = constant {value = dense<%s> : tensor<f32>} : tensor<f32>" % lit(1 / math.sqrt(H)))

    def norm(p, x, g):
        return [
            "  %%%s_sq = mul %s, %s : %s" % (p, x, x, act),
            "  %%%s_ms = reduce_mean %%%s_sq {axes = [1], keepdims = 1} : tensor<%dx1xf32>" % (p, p, S),
            "  %%%s_e = add %%%s_ms, %%eps : tensor<%dx1xf32>" % (p, p, S),
            "  %%%s_r = rsqrt %%%s_e : tensor<%dx1xf32>" % (p, p, S),
            "  %%%s_n = mul %s, %%%s_r : %s" % (p, x, p, act),
            "  %%%s = mul %%%s_n, %s : %s" % (p, p, g, act),
        ]

    def rope(p, x):
        half = "tensor<%dx%dxf32>" % (S, H // 2)
        return [
            "  %%%s_lo = slice %s {axes = [1], ends = [%d], starts = [0], steps = [1]} : %s" % (p, x, H // 2, half),
            "  %%%s_hi = slice %s {axes = [1], ends = [%d], starts = [%d], steps = [1]} : %s" % (p, x, H, H // 2, half),
            "  %%%s_nh = neg %%%s_hi : %s" % (p, p, half),
            "  %%%s_rh = concat %%%s_nh, %%%s_lo {axis = 1} : %s" % (p, p, p, act),
            "  %%%s_c = mul %s, %%cos : %s" % (p, x, act),
            "  %%%s_s = mul %%%s_rh, %%sin : %s" % (p, p, act),
            "  %%%s = add %%%s_c, %%%s_s : %s" % (p, p, p, act),
        ]

    x = "%x"
    for b in range(a.blocks):
        p = "b%d" % b
        for name, shape in shapes.items():
            ty = "tensor<%sxf32>" % "x".join(map(str, shape))
            lines.append('  %%%s_%s = weight {name = "blocks.%d.%s"} : %s' % (p, name, b, name, ty))
        lines += norm(p + "_n1", x, "%%%s_g1" % p)
        for w in ("q", "k", "v"):
            lines.append("  %%%s_%s = matmul %%%s_n1, %%%s_w%s : %s" % (p, w, p, p, w, act))
        lines += rope(p + "_qr", "%%%s_q" % p)
        lines += rope(p + "_kr", "%%%s_k" % p)
        ss = t % (S, S)
        lines += [
            "  %%%s_kt = transpose %%%s_kr {perm = [1, 0]} : %s" % (p, p, t % (H, S)),
            "  %%%s_qk = matmul %%%s_qr, %%%s_kt : %s" % (p, p, p, ss),
            "  %%%s_sc = mul %%%s_qk, %%scale : %s" % (p, p, ss),
            "  %%%s_m = add %%%s_sc, %%mask : %s" % (p, p, ss),
            "  %%%s_p = softmax %%%s_m {axis = 1} : %s" % (p, p, ss),
            "  %%%s_att = matmul %%%s_p, %%%s_v : %s" % (p, p, p, act),
            "  %%%s_o = matmul %%%s_att, %%%s_wo : %s" % (p, p, p, act),
            "  %%%s_h = add %s, %%%s_o : %s" % (p, x, p, act),
        ]
        lines += norm(p + "_n2", "%%%s_h" % p, "%%%s_g2" % p)
        ff = t % (S, F)
        lines += [
            "  %%%s_up = matmul %%%s_n2, %%%s_w1 : %s" % (p, p, p, ff),
            "  %%%s_act = silu %%%s_up : %s" % (p, p, ff),
            "  %%%s_gate = matmul %%%s_n2, %%%s_w3 : %s" % (p, p, p, ff),
            "  %%%s_gl = mul %%%s_act, %%%s_gate : %s" % (p, p, p, ff),
            "  %%%s_down = matmul %%%s_gl, %%%s_w2 : %s" % (p, p, p, act),
            "  %%%s_out = add %%%s_h, %%%s_down : %s" % (p, p, p, act),
        ]
        x = "%%%s_out" % p
    lines.append('  %%gf = weight {name = "norm"} : tensor<%dxf32>' % H)
    lines.append('  %%lm = weight {name = "lm_head"} : tensor<%dx%dxf32>' % (H, V))
    lines += norm("fn", x, "%gf")
    lines.append("  %%logits = matmul %%fn, %%lm : %s" % (t % (S, V)))
    lines.append("  return %logits")
    lines.append("}")
    with open(os.path.join(a.out, "decoder.kir"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
