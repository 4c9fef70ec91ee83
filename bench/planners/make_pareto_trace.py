#!/usr/bin/env python3
"""A Pareto (power-law) heavy-tailed trace of sequence lengths, one a line (the text trace format).

``dcpack generate`` has lognormal families only; this draws the Pareto-like heavy tail that
long-context training mixes show: length = int(scale * paretovariate(alpha)), clipped to
[min, max], with Python's ``random.Random("pareto/N/SEED")`` (deterministic on every platform,
as ``dcpack generate`` seeds its families).  The committed bench/data/pareto_n4096_seed1.txt is

    python3 bench/planners/make_pareto_trace.py --n 4096 --seed 1 > bench/data/pareto_n4096_seed1.txt

(alpha 1.1, scale 1024, min 256, max 131072: median about 1.9K tokens, about 1 sequence in
12 above 10K; tail index 1.1 means a few sequences hold a large part of the tokens).
"""
import argparse
import random
import sys


def lengths(n: int, seed: int, alpha: float, scale: int, lo: int, hi: int):
    rng = random.Random(f"pareto/{n}/{seed}")
    return [int(min(max(scale * rng.paretovariate(alpha), lo), hi)) for _ in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--alpha", type=float, default=1.1)
    ap.add_argument("--scale", type=int, default=1024)
    ap.add_argument("--min", type=int, default=256)
    ap.add_argument("--max", type=int, default=131072)
    a = ap.parse_args()
    sys.stdout.write("".join(f"{v}\n" for v in lengths(a.n, a.seed, a.alpha, a.scale, a.min, a.max)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
