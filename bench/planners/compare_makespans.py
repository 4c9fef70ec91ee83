#!/usr/bin/env python3
"""compare_makespans.py - two builds' plans, cell by cell.

    bench_plan --makespans > old.txt        (one build)
    bench_plan --makespans > new.txt        (the other)
    python3 bench/planners/compare_makespans.py old.txt new.txt [--scheduler NAME]

Each line of a --makespans file is `trace|configuration|scheduler|hash|makespan` (or `...|skipped`).
For every scheduler: how many cells have a lower, equal or higher makespan in NEW, the median and
extreme ratios, every cell that rose, and every cell OLD planned that NEW skips or lacks; then every
cell where `balanced` in NEW is above `dynamic_cp` in NEW.  Exit status 1 when any makespan rose, a
planned cell was lost or `balanced` is above `dynamic_cp` anywhere, 2 on unreadable input.
"""
import statistics
import sys


def die(message):
    print(f"compare_makespans: {message}", file=sys.stderr)
    sys.exit(2)


def load(path):
    cells = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.rstrip("\n").split("|")
            if len(fields) == 4 and fields[3] == "skipped":
                cells[tuple(fields[:3])] = None  # not planned
                continue
            if len(fields) != 5:
                continue  # bench_plan's header and summary lines
            try:
                cells[tuple(fields[:3])] = int(fields[4])
            except ValueError:
                die(f"{path}:{number}: makespan '{fields[4]}' is not an integer")
    if not any(v is not None for v in cells.values()):
        die(f"{path}: no `trace|configuration|scheduler|hash|makespan` lines (bench_plan --makespans)")
    return cells


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    only = None
    if "--scheduler" in argv:
        i = argv.index("--scheduler")
        if i + 1 >= len(argv):
            die("--scheduler needs a name")
        only = argv[i + 1]
        args = [a for a in args if a != only]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        old, new = load(args[0]), load(args[1])
    except OSError as e:
        die(str(e))
    status = 0
    schedulers = sorted({k[2] for k in old.keys() | new.keys()} if only is None else {only})
    for s in schedulers:
        keys = sorted(k for k in new if k[2] == s and new[k] is not None and old.get(k) is not None)
        lost = sorted(k for k in old if k[2] == s and old[k] is not None and new.get(k) is None)
        if keys:
            ratios = [new[k] / old[k] if old[k] > 0 else (1.0 if new[k] == 0 else float("inf")) for k in keys]
            lower = sum(new[k] < old[k] for k in keys)
            higher = [k for k in keys if new[k] > old[k]]
            print(f"{s:12s} cells {len(keys):4d}  lower {lower:4d}  equal {len(keys) - lower - len(higher):4d}  "
                  f"higher {len(higher):4d}  ratio median {statistics.median(ratios):.4f}  "
                  f"best {min(ratios):.4f}  worst {max(ratios):.4f}")
            for k in higher:
                ratio = f" ({new[k] / old[k]:.5f})" if old[k] > 0 else ""
                print(f"  rose: {k[0]} {k[1]}: {old[k]} -> {new[k]}{ratio}")
                status = 1
        for k in lost:
            print(f"  no longer planned: {k[0]} {k[1]} {k[2]}: {old[k]} -> " + ("skipped" if k in new else "absent"))
            status = 1
        only_new = sum(1 for k in new if k[2] == s and new[k] is not None and old.get(k) is None)
        if only_new:
            print(f"  {only_new} cells planned only in {args[1]}")
    for k in sorted(new):
        if k[2] != "balanced" or new[k] is None or (only and only != "balanced"):
            continue
        d = new.get((k[0], k[1], "dynamic_cp"))
        if d is not None and new[k] > d:
            print(f"balanced above dynamic_cp: {k[0]} {k[1]}: {new[k]} > {d}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
