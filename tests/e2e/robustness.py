#!/usr/bin/env python3
"""Robustness test for the kiln CLI: bad input is a diagnostic, never a crash.

Takes the examples, the lit inputs and a few generated programs, and feeds `kiln opt`,
`kiln run` and `kiln compile` truncated copies, copies with flipped bytes and random bytes;
then feeds `kiln run` broken .npy inputs, and `kiln run` and `kiln dump` damaged .kmod
module files, which must always be refused (exit 1). Every run must exit 0 (the input happened to be valid) or
1 with `error:` on stderr. A signal (negative return code), any other exit code or a
run over the per-run timeout is a failure: 10 s, or for the mutated copies of a file three
times the slowest run of the file unchanged (which may take up to 120 s: a lit input with a
dozen symbolic-shape matmul kernels compiles for 5 s on 2 cores with a cold kernel cache,
10 s while the lit suite runs beside it). The whole test stays under --budget seconds
(default 40): the mutation loops stop early when time runs out.

usage: robustness.py --kiln PATH --graphgen PATH --source-root DIR [--seed N] [--budget S]
"""
import argparse
import glob
import os
import random
import struct
import subprocess
import sys
import tempfile
import time

RUN_TIMEOUT = 10
# A checked-in file unchanged: its compile time is the lit suite's business, not a hang.
UNCHANGED_TIMEOUT = 120
# A mutated copy may take this many times the slowest run of the file unchanged.
MUTATION_SLOWDOWN = 3
# A program with one argument, for the .npy cases.
NPY_PROGRAM = """func @main(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
  %0 = neg %x : tensor<2x3xf32>
  return %0
}
"""


class Harness:
    def __init__(self, kiln, workdir, deadline):
        self.kiln = kiln
        self.workdir = workdir
        self.deadline = deadline
        self.cases = 0
        self.failures = []
        self.timeout = RUN_TIMEOUT
        self.slowest = 0.0  # the longest run since it was last set to 0

    def out_of_time(self):
        return time.monotonic() > self.deadline

    def write(self, name, data):
        path = os.path.join(self.workdir, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def expect_clean(self, args, label, data, stdin=None):
        """Runs kiln with args; records a failure unless it exits 0, or 1 with error:."""
        self.cases += 1
        start = time.monotonic()
        try:
            proc = subprocess.run([self.kiln] + args, input=stdin, capture_output=True,
                                  timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.fail(label, data, "timed out after %.0f s" % self.timeout)
            return None
        finally:
            self.slowest = max(self.slowest, time.monotonic() - start)
        rc = proc.returncode
        if rc < 0:
            self.fail(label, data, "killed by signal %d\n%s" % (-rc, proc.stderr[-2000:].decode(
                "utf-8", "replace")))
        elif rc not in (0, 1):
            self.fail(label, data, "exit code %d" % rc)
        elif rc == 1 and b"error:" not in proc.stderr:
            self.fail(label, data, "exit code 1 without 'error:' on stderr: %r" % proc.stderr[:300])
        return rc

    def fail(self, label, data, why):
        name = "failure-%d.bin" % len(self.failures)
        self.write(name, data)
        self.failures.append("%s: %s (input: %s)" % (label, why, name))

    def program_cases(self, label, data, inputs):
        path = self.write("case.kir", data)
        self.expect_clean(["opt", path], label + " [opt]", data)
        self.expect_clean(["opt", "-", "--pass=canonicalize,cse,dce"], label + " [opt - stdin]",
                          data, stdin=data)
        self.expect_clean(["run", path] + ["--input=" + i for i in inputs], label + " [run]", data)
        kmod = os.path.join(self.workdir, "case.kmod")
        if self.expect_clean(["compile", path, "-o", kmod], label + " [compile]", data) == 0:
            self.expect_clean(["run", kmod] + ["--input=" + i for i in inputs],
                              label + " [run .kmod]", data)

    def kmod_cases(self, label, data, mutated):
        """A changed module file must be refused by run and dump: exit 1 with error:."""
        path = self.write("case.kmod", mutated)
        for cmd in (["run", path], ["dump", path]):
            rc = self.expect_clean(cmd, "%s [%s]" % (label, cmd[0]), mutated)
            if rc == 0 and mutated != data:
                self.fail(label, mutated, "a damaged module was accepted by kiln " + cmd[0])


def mutations(rng, data, count):
    """Truncations at spread-out lengths, then copies with 1-4 bytes changed."""
    n = len(data)
    lengths = sorted({0, 1, n - 1} | {rng.randrange(n + 1) for _ in range(count)} |
                     {n * k // count for k in range(count)})
    for length in lengths:
        if 0 <= length < n:
            yield "truncated at %d" % length, data[:length]
    interesting = b"%@{}()<>[]:,=x-0123456789\n\"\\"
    for i in range(count):
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(n)
            b[pos] = rng.choice(interesting) if rng.random() < 0.6 else rng.randrange(256)
        yield "mutation %d" % i, bytes(b)


def graphgen_programs(graphgen):
    """(label, text, input literals) for a few static and symbolic generated programs."""
    out = []
    for seed, extra in [(1, []), (2, []), (3, []), (1, ["--symbolic"]), (2, ["--symbolic"])]:
        proc = subprocess.run([graphgen, "--seed", str(seed)] + extra, capture_output=True,
                              timeout=RUN_TIMEOUT)
        if proc.returncode != 0:
            raise SystemExit("robustness: kiln-graphgen --seed %d %s failed:\n%s" %
                             (seed, " ".join(extra), proc.stderr.decode()))
        inputs = []
        for line in proc.stdout.decode().splitlines():
            if line.startswith("// kiln-inputs:"):
                inputs = line[len("// kiln-inputs:"):].split()
        out.append(("graphgen seed %d %s" % (seed, " ".join(extra)), proc.stdout, inputs))
    return out


def npy_bytes(descr, shape, payload, fortran=False, version=(1, 0), magic=b"\x93NUMPY"):
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False",
        "(" + "".join("%d, " % d for d in shape) + ")")
    header = header.encode("latin1")
    size_bytes = 2 if version[0] == 1 else 4
    pad = (64 - (len(magic) + 2 + size_bytes + len(header) + 1) % 64) % 64
    header += b" " * pad + b"\n"
    size = struct.pack("<H" if size_bytes == 2 else "<I", len(header))
    return magic + bytes(version) + size + header + payload


def npy_cases(h, rng):
    program = h.write("npy_program.kir", NPY_PROGRAM.encode())
    good_payload = struct.pack("<6f", *range(6))
    good = npy_bytes("<f4", (2, 3), good_payload)
    rc = h.expect_clean(["run", program, "--input=@" + h.write("good.npy", good)],
                        "valid .npy", good)
    if rc != 0:
        h.failures.append("valid .npy: `kiln run` should accept it (exit %s)" % rc)
    bad = [
        ("empty file", b""),
        ("bad magic", npy_bytes("<f4", (2, 3), good_payload, magic=b"\x93NUMPX")),
        ("version 9", npy_bytes("<f4", (2, 3), good_payload, version=(9, 0))),
        ("fortran order", npy_bytes("<f4", (2, 3), good_payload, fortran=True)),
        ("complex dtype", npy_bytes("<c8", (2, 3), good_payload * 2)),
        ("big-endian dtype", npy_bytes(">f4", (2, 3), good_payload)),
        ("object dtype", npy_bytes("|O", (2, 3), good_payload)),
        ("wrong shape", npy_bytes("<f4", (3, 2), good_payload)),
        ("wrong rank", npy_bytes("<f4", (6,), good_payload)),
        ("wrong dtype", npy_bytes("<i4", (2, 3), good_payload)),
        ("short payload", npy_bytes("<f4", (2, 3), good_payload[:10])),
        ("huge shape", npy_bytes("<f4", (1 << 40, 1 << 30), good_payload)),
        ("negative dim", npy_bytes("<f4", (-2, 3), good_payload)),
        ("header garbage", good[:10] + b"{'descr': <f4 shape (2,3)}" + b" " * 37 + b"\n"),
    ]
    for label, data in bad:
        h.expect_clean(["run", program, "--input=@" + h.write("bad.npy", data)],
                       ".npy " + label, data)
    h.expect_clean(["run", program, "--input=@" + os.path.join(h.workdir, "missing.npy")],
                   ".npy missing file", b"")
    for label, data in mutations(rng, good, 40):
        if h.out_of_time():
            return
        h.expect_clean(["run", program, "--input=@" + h.write("bad.npy", data)],
                       ".npy " + label, data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--graphgen", required=True)
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--budget", type=float, default=40.0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    start = time.monotonic()

    sources = []
    for pattern in ["examples/*.kir", "tests/lit/**/*.kir"]:
        for path in sorted(glob.glob(os.path.join(args.source_root, pattern), recursive=True)):
            with open(path, "rb") as f:
                sources.append((os.path.relpath(path, args.source_root), f.read(), []))
    # A fixed number of files keeps the run time independent of how many lit tests exist.
    rng.shuffle(sources)
    sources = sources[:8] + graphgen_programs(args.graphgen)

    with tempfile.TemporaryDirectory(prefix="kiln-robustness-") as workdir:
        h = Harness(args.kiln, workdir, start + args.budget)
        # The .npy cases first: they are few, and the program loops use what time is left.
        npy_cases(h, rng)
        for label, data, inputs in sources:
            if h.out_of_time():
                break
            h.timeout, h.slowest = UNCHANGED_TIMEOUT, 0.0
            h.program_cases(label + " (unchanged)", data, inputs)
            h.timeout = max(RUN_TIMEOUT, MUTATION_SLOWDOWN * h.slowest)
            for what, mutated in mutations(rng, data, 12):
                if h.out_of_time():
                    break
                h.program_cases("%s %s" % (label, what), mutated, inputs)
        h.timeout = RUN_TIMEOUT
        for path in sorted(glob.glob(os.path.join(args.source_root,
                                                  "tests/fuzz/corpus/module/*.kmod"))):
            with open(path, "rb") as f:
                data = f.read()
            for what, mutated in mutations(rng, data, 12):
                if h.out_of_time():
                    break
                h.kmod_cases("%s %s" % (os.path.basename(path), what), data, mutated)
        for i in range(40):
            if h.out_of_time():
                break
            size = rng.randrange(1, 400)
            if i % 2:
                data = bytes(rng.randrange(256) for _ in range(size))
            else:
                data = bytes(rng.choice(b"func@%tensor<>x{}()f32i64=:,-> \n0123") for _ in
                             range(size))
            h.program_cases("random bytes %d" % i, data, [])
        elapsed = time.monotonic() - start
        print("robustness: %d cases in %.1f s, %d failures" % (h.cases, elapsed, len(h.failures)))
        for f in h.failures[:30]:
            print("FAIL " + f)
        if h.failures:
            # Keep the failing inputs for inspection.
            keep = tempfile.mkdtemp(prefix="kiln-robustness-failures-")
            for name in os.listdir(workdir):
                if name.startswith("failure-"):
                    os.replace(os.path.join(workdir, name), os.path.join(keep, name))
            print("failing inputs moved to " + keep)
            return 1
        if h.cases < 50:
            print("robustness: too few cases ran (%d)" % h.cases)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
