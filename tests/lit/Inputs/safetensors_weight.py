#!/usr/bin/env python3
"""Writes a safetensors file holding one weight (no numpy needed):

  safetensors_weight.py OUT.safetensors NAME ROWS COLS [F32|BF16|F16]

Element (r, c) is ((r * 7 + c * 13) mod 17 - 8) / 16: varied, exact in f32, bf16 and f16,
the same on every run. F32 unless the dtype says otherwise.
"""
import json
import struct
import sys


def main():
    out, name, rows, cols = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    dtype = sys.argv[5] if len(sys.argv) > 5 else "F32"
    values = [((r * 7 + c * 13) % 17 - 8) / 16 for r in range(rows) for c in range(cols)]
    if dtype == "F32":
        data = struct.pack(f"<{rows * cols}f", *values)
    elif dtype == "F16":
        data = struct.pack(f"<{rows * cols}e", *values)
    else:  # BF16: the high half of the f32 (exact for these values)
        data = b"".join(struct.pack("<f", v)[2:] for v in values)
    header = json.dumps({name: {"dtype": dtype, "shape": [rows, cols],
                                "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)


if __name__ == "__main__":
    main()
