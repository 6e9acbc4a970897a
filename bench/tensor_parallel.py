#!/usr/bin/env python3
"""Tensor parallelism on cpu devices: a TinyLlama decoder layer decoding one token at
context 2048 (or a small layer with --quick), timed three ways in one script:

  one device     cpu[0] with 2 threads (KILN_CPU_DEVICES=1, --cpu-threads=2)
  tensor:2       the same layer sharded over cpu[0] and cpu[1], one thread each, in one
                 process (KILN_CPU_DEVICES=2)
  tensor:2, MPI  the same .kmod under `mpirun -np 2` (scripts/mpirun.sh): one rank per device

Prints a Markdown table: median ms per token, the ratio to one device, and the bytes that
enter collectives per token (what kiln bench reports) and per device. Every variant's
outputs are checked against the one-device run (rtol 1e-4) first.

  /usr/bin/python3 bench/tensor_parallel.py [--quick] [--repetitions N] [--kiln PATH]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a small layer, 2 repetitions")
    p.add_argument("--repetitions", type=int, help="timed calls (default 20, 2 with --quick)")
    p.add_argument("--kiln", default=os.path.join(HERE, "..", "build", "tools", "kiln"))
    p.add_argument("--context", type=int, default=2048, help="past tokens (default 2048)")
    p.add_argument("--keep", metavar="DIR", help="write the layer, modules and inputs to DIR and keep them")
    return p.parse_args()


ARGS = parse_args()
# The layer, its weights and inputs come from bench/run.py (which parses its own flags on
# import: give it none).
_argv, sys.argv = sys.argv, sys.argv[:1]
sys.path.insert(0, HERE)
import run as layers  # noqa: E402
sys.argv = _argv
np = layers.np


def kiln(args, env=None, mpi=0):
    cmd = [ARGS.kiln] + args
    if mpi:
        cmd = [os.path.join(HERE, "..", "scripts", "mpirun.sh"), "-np", str(mpi), "-x",
               "KILN_CPU_DEVICES"] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})},
                       timeout=1800)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def bench_line(out):
    m = re.search(r"median ([0-9.]+) ms", out)
    c = re.search(r"([0-9]+) bytes into collectives per call", out)
    return float(m.group(1)), int(c.group(1)) if c else 0


def main():
    layer = layers.Layer(ARGS.quick)
    past = 16 if ARGS.quick else ARGS.context
    reps = ARGS.repetitions or (2 if ARGS.quick else 20)
    tmp = ARGS.keep or tempfile.mkdtemp(prefix="kiln-tp-")
    os.makedirs(tmp, exist_ok=True)
    try:
        rng = np.random.default_rng(1)
        weights = layers.decoder_weights(layer, rng)
        layers.save_safetensors(os.path.join(tmp, "decoder.safetensors"),
                                {n: ("F32", w) for n, w in weights.items()})
        cos, sin = layers.rotary_tables(layer, [past])
        shape = (layer.kv_heads, past, layer.head_dim)
        inputs = {"x": rng.standard_normal((1, layer.hidden), dtype=np.float32), "cos": cos,
                  "sin": sin, "past_k": rng.standard_normal(shape, dtype=np.float32),
                  "past_v": rng.standard_normal(shape, dtype=np.float32)}
        flags = []
        for n, v in inputs.items():
            np.save(os.path.join(tmp, n + ".npy"), v)
            flags.append(f"--input=@{os.path.join(tmp, n + '.npy')}")
        kir = os.path.join(tmp, "decoder.kir")
        with open(kir, "w") as f:
            f.write(layers.decoder_kir(layer, 1, past))
        one, tp = os.path.join(tmp, "one.kmod"), os.path.join(tmp, "tp.kmod")
        env1, env2 = {"KILN_CPU_DEVICES": "1"}, {"KILN_CPU_DEVICES": "2"}
        kiln(["compile", kir, "--device=cpu[0]", "-o", one], env1)
        report = kiln(["compile", kir, "--device=cpu[0]", "--device=cpu[1]", "--partition=tensor:2",
                       "-o", tp, "--report=placement"], env2)
        collectives = re.search(r"collectives: ([0-9]+)", report)
        shards = len(re.findall(r"\(shard ", report))

        # The outputs first: each variant against the one-device run.
        def outputs(name, module, env, mpi=0):
            folder = os.path.join(tmp, name)
            kiln(["run", module, f"--output-dir={folder}"] + flags, env, mpi)
            return [np.load(os.path.join(folder, f"{i}.npy")) for i in range(3)]
        want = outputs("one", one, env1)
        for name, module, env, mpi in [("tp", tp, env2, 0), ("tpmpi", tp, env2, 2)]:
            for w, g in zip(want, outputs(name, module, env, mpi)):
                err = np.max(np.abs(w - g)) / max(1.0, float(np.max(np.abs(w))))
                if err > 1e-4:
                    sys.exit(f"{name}: largest relative error {err:g}")

        timing = ["bench", f"--repetitions={reps}", "--warmup=2"] + flags
        rows = [("one cpu device, 2 threads", *bench_line(kiln(timing[:1] + [one, "--cpu-threads=2"]
                                                               + timing[1:], env1))),
                ("tensor:2, 2 cpu devices x 1 thread, one process",
                 *bench_line(kiln(timing[:1] + [tp] + timing[1:], env2))),
                ("tensor:2, 2 MPI ranks x 1 thread", *bench_line(kiln(timing[:1] + [tp] + timing[1:],
                                                                    env2, mpi=2)))]
        base = rows[0][1]
        print(f"### Tensor parallelism: decoder layer decode, 1 token at context {past}\n")
        print(f"{layer.describe()}; f32; {collectives.group(1) if collectives else 0} collectives "
              f"per token, {shards} weight shards (tensor:2).\n")
        print("| variant | median ms / token | vs one device | bytes into collectives / token "
              "| per device |")
        print("|---|---|---|---|---|")
        for name, ms, coll in rows:
            print(f"| {name} | {ms:.3f} | {ms / base:.2f}x | {coll} | {coll // 2 if coll else 0} |")
        print("\nOutputs of every variant match the one-device run (relative error <= 1e-4).")
    finally:
        if not ARGS.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
