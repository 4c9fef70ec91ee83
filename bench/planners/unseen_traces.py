#!/usr/bin/env python3
"""unseen_traces.py - batches outside the benchmark matrix, to try a planner change on.

    python3 bench/planners/unseen_traces.py DIR [--seeds 2 3 4] [--sizes 256 1024 4096]
    build/bench_plan --traces DIR --no-scaling --makespans > old.txt   (one build)
    build/bench_plan --traces DIR --no-scaling --makespans > new.txt   (the other)
    python3 bench/planners/compare_makespans.py old.txt new.txt

Writes FAMILY_nN_seedS.txt (one length per line) for the four families of the bundled traces,
drawn afresh from Python's own generator (stdlib only; the same files on every machine):
  mlmdefault  lognormal around 1024 (sigma 1.5), clipped to [128, 8192]
  longsft     lognormal around 4096 (sigma 1.2), clipped to [256, 131072]
  bimodal     90% normal around 1024 (sd 300, clipped to [64, 4096]), 10% uniform in [32768, 131072]
  uniform32k  uniform integers in [1, 32768]
Seed 1 is left out: the bundled traces are the benchmark's own.
"""
import argparse
import math
import os
import random


def family_lengths(name, n, rng):
    if name == "mlmdefault":
        return [min(8192, max(128, rng.lognormvariate(math.log(1024), 1.5))) for _ in range(n)]
    if name == "longsft":
        return [min(131072, max(256, rng.lognormvariate(math.log(4096), 1.2))) for _ in range(n)]
    if name == "bimodal":
        return [min(4096, max(64, rng.gauss(1024, 300))) if rng.random() < 0.9 else rng.uniform(32768, 131072)
                for _ in range(n)]
    if name == "uniform32k":
        return [rng.randint(1, 32768) for _ in range(n)]
    raise ValueError(name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--seeds", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    for seed in args.seeds:
        for n in args.sizes:
            rng = random.Random(seed * 1000 + n)
            for name in ("mlmdefault", "longsft", "bimodal", "uniform32k"):
                lengths = family_lengths(name, n, rng)
                with open(os.path.join(args.dir, f"{name}_n{n}_seed{seed}.txt"), "w") as f:
                    f.write("\n".join(str(int(x)) for x in lengths) + "\n")


if __name__ == "__main__":
    main()
