#!/usr/bin/env python3
"""Small .npy helper for lit tests (no numpy needed).

  npy.py make OUT.npy SHAPE DTYPE [--seed=N] [--nan=I,J,...]
      writes a SHAPE (e.g. 5x37) array of DTYPE (f16, f32, f64, i32, i64) with deterministic
      pseudo-random values in [-4, 4) (integers in [-50, 50)); --nan puts NaN at those
      flat indices.
  npy.py close A.npy|A_DIR B.npy|B_DIR [--tol=T]
      compares two arrays (or every .npy file of B_DIR with A_DIR's of the same name): same
      shape and type, NaN at the same places, integers equal, floats within T (default
      2e-5) of the largest magnitude of B (at least 1).
"""
import ast
import math
import os
import random
import struct
import sys

TYPES = {"f16": ("<f2", "e"), "f32": ("<f4", "f"), "f64": ("<f8", "d"), "i32": ("<i4", "i"), "i64": ("<i8", "q")}
BY_DESCR = {d: f for d, f in TYPES.values()}


def write(path, shape, dtype, values):
    descr, fmt = TYPES[dtype]
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % d for d in shape))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        sys.exit("%s: not a .npy file" % path)
    if data[6] == 1:
        n, start = struct.unpack("<H", data[8:10])[0], 10
    else:
        n, start = struct.unpack("<I", data[8:12])[0], 12
    header = ast.literal_eval(data[start:start + n].decode("latin1"))
    fmt = BY_DESCR.get(header["descr"])
    if fmt is None:
        sys.exit("%s: unsupported dtype %s" % (path, header["descr"]))
    count = math.prod(header["shape"])
    body = data[start + n:]
    return header["shape"], header["descr"], struct.unpack("<%d%s" % (count, fmt), body)


def make(args):
    out, shape, dtype = args[0], [int(d) for d in args[1].split("x") if d], args[2]
    seed, nans = 1, []
    for a in args[3:]:
        if a.startswith("--seed="):
            seed = int(a[7:])
        elif a.startswith("--nan="):
            nans = [int(i) for i in a[6:].split(",") if i]
    rng = random.Random(seed)
    count = math.prod(shape)
    if dtype.startswith("f"):
        values = [rng.uniform(-4, 4) for _ in range(count)]
        for i in nans:
            values[i] = float("nan")
    else:
        values = [rng.randrange(-50, 50) for _ in range(count)]
    write(out, shape, dtype, values)


def close(args):
    tol = 2e-5
    files = []
    for a in args:
        if a.startswith("--tol="):
            tol = float(a[6:])
        else:
            files.append(a)
    if os.path.isdir(files[1]):
        names = sorted(n for n in os.listdir(files[1]) if n.endswith(".npy"))
        for n in names:
            close_files(os.path.join(files[0], n), os.path.join(files[1], n), tol)
        print("close: %d files" % len(names))
    else:
        close_files(files[0], files[1], tol)
        print("close: 1 file")


def close_files(fa, fb, tol):
    (sa, da, a), (sb, db, b) = read(fa), read(fb)
    if sa != sb or da != db:
        sys.exit("%s: mismatch: %s %s vs %s %s" % (fa, sa, da, sb, db))
    scale = max([1.0] + [abs(x) for x in b if not math.isnan(x)])
    for i, (x, y) in enumerate(zip(a, b)):
        if math.isnan(x) or math.isnan(y):
            bad = not (math.isnan(x) and math.isnan(y))
        else:
            bad = abs(x - y) > (tol * scale if db[1] == "f" else 0)
        if bad:
            sys.exit("%s: mismatch at flat index %d: %r vs %r (shape %s)" % (fa, i, x, y, sa))


if __name__ == "__main__":
    {"make": make, "close": close}[sys.argv[1]](sys.argv[2:])
