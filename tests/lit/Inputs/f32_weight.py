#!/usr/bin/env python3
"""Writes a safetensors file holding one f32 weight (no numpy needed):

  f32_weight.py OUT.safetensors NAME ROWS COLS

Element (r, c) is ((r * 7 + c * 13) mod 17 - 8) / 16: varied, exact in f32, the same on
every run.
"""
import json
import struct
import sys


def main():
    out, name, rows, cols = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    values = [((r * 7 + c * 13) % 17 - 8) / 16 for r in range(rows) for c in range(cols)]
    data = struct.pack(f"<{rows * cols}f", *values)
    header = json.dumps({name: {"dtype": "F32", "shape": [rows, cols],
                                "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)


if __name__ == "__main__":
    main()
