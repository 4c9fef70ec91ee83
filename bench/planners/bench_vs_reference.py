#!/usr/bin/env python3
"""Planning time of dcpack against the reference schedulers, measured in the same run.

The reference is Megatron-LM's DpBalancedScheduler and DefaultDynamicCPScheduler
(megatron/core/datasets/data_schedule.py) with the pure helpers they call
(next_hdp_group_packing_aware, align_sample_id_groups, dcp_gpus_needed in
megatron/core/datasets/data_schedule_utils.py). Nothing of it lives in this repository: the
two source files are read at run time from the user's checkout (--megatron) or from a git
repository at a revision (--megatron-git), and only those classes and functions are taken out
of them (by their syntax tree) and executed, with standard-library imports and constant
assignments of the modules and inert stand-ins for names bound to torch or megatron (used only
in annotations of methods this benchmark never calls). No torch is needed.

For every point (trace x ranks x max_seqlen_per_rank x scheduler) it times one reference plan,
get_groups_and_subsamples() on [(id, length), ...], with time.perf_counter (median of
--repeat runs), and dcpack's plan with `dcpack plan --format json --repeat K` (its
stats.plan_seconds: the median of K runs of dcp_plan_compute(), which also validates the plan).
Both plans must be identical: the same microbatches, each rank's ids in the same order.
A plan that differs, or a planner that fails, is reported and the exit status is 1.

    python3 bench/planners/bench_vs_reference.py --megatron ~/Megatron-LM
    python3 bench/planners/bench_vs_reference.py --megatron-git /path/to/Megatron-LM.git@dev \\
        --points mlmdefault_n4096_seed1:128 longsft_n4096_seed1:128:8192:dynamic_cp
"""
import argparse
import ast
import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

REF_UTILS = "megatron/core/datasets/data_schedule_utils.py"
REF_SCHED = "megatron/core/datasets/data_schedule.py"
REF_UTILS_FUNCTIONS = ("dcp_gpus_needed", "next_hdp_group_packing_aware", "align_sample_id_groups")
REF_SCHED_CLASSES = ("BasePackingScheduler", "DpBalancedScheduler", "DefaultDynamicCPScheduler")
SCHEDULERS = ("dp_balanced", "dynamic_cp")
DEFAULT_POINTS = ("mlmdefault_n4096_seed1:32", "mlmdefault_n4096_seed1:128", "mlmdefault_n16384_seed1:512")
TRACE_NAME = re.compile(r"^(mlmdefault|longsft|bimodal|uniform32k)_n([0-9]+)_seed([0-9]+)$")
SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/planners/ -> the tree


class BenchError(Exception):
    """A failure the benchmark reports with a message and exit status 1."""


# ---------------------------------------------------------------------------------------------
# Loading the reference from its own source

class _Unavailable:
    """Stands for a name the reference binds to torch or megatron. Attribute access (as in a
    `dev: torch.device` annotation) works; calling it means the benchmark reached code it does
    not support, and says so."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        return _Unavailable(self._name + "." + attr)

    def __call__(self, *args, **kwargs):
        raise BenchError(f"the reference called {self._name}, which needs torch/megatron "
                         "(this benchmark runs the pure scheduling code only)")

    def __repr__(self):
        return f"<unavailable {self._name}>"


# sys.stdlib_module_names is Python 3.10+; before that, the modules the reference imports.
_STDLIB = getattr(sys, "stdlib_module_names", frozenset(
    ("__future__", "abc", "collections", "dataclasses", "enum", "functools", "itertools",
     "logging", "math", "os", "re", "sys", "typing", "warnings")))


def _stdlib(module):
    return module is not None and module.split(".")[0] in _STDLIB


def _load_into(ns, label, src, functions, classes):
    """Execute the standard-library imports and constant assignments of one reference module,
    then the named top-level functions and classes, into ns."""
    tree = ast.parse(src, filename=label)
    wanted = set(functions) | set(classes)
    found = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            stdlib = (_stdlib(module) if isinstance(node, ast.ImportFrom)
                      else all(_stdlib(a.name) for a in node.names))
            if isinstance(node, ast.ImportFrom) and node.level:
                stdlib = False
            if stdlib:
                exec(compile(ast.Module(body=[node], type_ignores=[]), label, "exec"), ns)
            else:
                for a in node.names:
                    bound = a.asname or a.name.split(".")[0]
                    ns.setdefault(bound, _Unavailable(bound))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            try:
                ast.literal_eval(node.value)
            except ValueError:
                continue  # not a constant: the scheduling code does not read it
            exec(compile(ast.Module(body=[node], type_ignores=[]), label, "exec"), ns)
        elif isinstance(node, ast.FunctionDef) and node.name in functions:
            found[node.name] = node
        elif isinstance(node, ast.ClassDef) and node.name in classes:
            found[node.name] = node
    missing = sorted(wanted - set(found))
    if missing:
        raise BenchError(f"{label}: the reference source has no top-level {', '.join(missing)} "
                         "(has the reference moved them?)")
    # Definitions in source order, so base classes come before the classes deriving from them.
    body = sorted(found.values(), key=lambda n: n.lineno)
    exec(compile(ast.Module(body=body, type_ignores=[]), label, "exec"), ns)


def read_sources(flag, root, git_spec, paths):
    """(description, {path: source}) of `paths` from a checkout (flag ROOT) or a git revision
    (flag-git REPO@REVISION); shared by the benchmarks that load a peer's code."""
    if git_spec:
        repo, sep, rev = git_spec.rpartition("@")
        if not sep or not repo or not rev:
            raise BenchError(f"{flag}-git {git_spec!r}: expected REPO@REVISION")

        def git(*cmd):
            r = subprocess.run(["git", "-C", repo, *cmd], capture_output=True, text=True)
            if r.returncode:
                raise BenchError(f"git -C {repo} {' '.join(cmd)}: {r.stderr.strip()}")
            return r.stdout
        commit = git("rev-parse", "--verify", rev + "^{commit}").strip()
        date = git("show", "-s", "--format=%cs", commit).strip()
        return (f"{repo} at {rev} = {commit[:12]} ({date})",
                {p: git("show", f"{commit}:{p}") for p in paths})
    sources = {}
    for p in paths:
        try:
            with open(os.path.join(root, p), encoding="utf-8") as f:
                sources[p] = f.read()
        except OSError as e:
            raise BenchError(f"{flag} {root}: cannot read {p}: {e.strerror}")
    described = f"{root}"
    r = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True)
    if r.returncode == 0:
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", *paths],
                               capture_output=True, text=True).stdout.strip()
        described += f" at {r.stdout.strip()[:12]}" + (" (files modified)" if dirty else "")
    return described, sources


def reference_sources(args):
    """(revision description, {path: source}) from --megatron or --megatron-git."""
    return read_sources("--megatron", args.megatron, args.megatron_git, (REF_UTILS, REF_SCHED))


def load_reference(sources):
    ns = {"__name__": "megatron_reference", "__builtins__": __builtins__}
    _load_into(ns, REF_UTILS, sources[REF_UTILS], REF_UTILS_FUNCTIONS, ())
    _load_into(ns, REF_SCHED, sources[REF_SCHED], (), REF_SCHED_CLASSES)
    return ns


def reference_scheduler(ns, scheduler, ranks, cp, max_seqlen_per_rank):
    # The reference's constructor is (max_seqlen_per_dp_cp_rank, cp_size, dp_size,
    # microbatch_group_size_per_vp_stage); dynamic CP treats the whole DPxCP group as one pool.
    if scheduler == "dp_balanced":
        return ns["DpBalancedScheduler"](max_seqlen_per_rank, cp, ranks // cp, None)
    return ns["DefaultDynamicCPScheduler"](max_seqlen_per_rank, 1, ranks, None, min_cp_size=1)


def time_reference(ns, scheduler, lengths, ranks, cp, max_seqlen_per_rank, repeat):
    times, plan = [], None
    for _ in range(repeat):
        s = reference_scheduler(ns, scheduler, ranks, cp, max_seqlen_per_rank)
        sample_id_seqlens = list(enumerate(lengths))
        t0 = time.perf_counter()
        groups = s.get_groups_and_subsamples(sample_id_seqlens)
        times.append(time.perf_counter() - t0)
        this = [[[int(i) for i in rank] for rank in mb] for mb in groups]
        if plan is not None and this != plan:
            raise BenchError("the reference planned the same batch differently on a repeat")
        plan = this
    return statistics.median(times), plan


# ---------------------------------------------------------------------------------------------
# dcpack

def dcpack_plan(dcpack, lengths, scheduler, ranks, cp, max_seqlen_per_rank, repeat):
    cmd = [dcpack, "plan", "--trace", "-", "--ranks", str(ranks),
           "--max-seqlen-per-rank", str(max_seqlen_per_rank), "--scheduler", scheduler,
           "--format", "json", "--repeat", str(repeat)]
    if scheduler == "dp_balanced":
        cmd += ["--cp", str(cp)]
    text = "".join(f"{s}\n" for s in lengths)
    r = subprocess.run(cmd, input=text, capture_output=True, text=True)
    if r.returncode:
        raise BenchError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    out = json.loads(r.stdout)
    return out["stats"]["plan_seconds"], out["plan"], cmd


# ---------------------------------------------------------------------------------------------
# Points

def parse_point(spec, schedulers, default_m):
    """TRACE:RANKS[:M[:SCHEDULER]] -> [(trace, ranks, M, scheduler), ...]."""
    parts = spec.split(":")
    if not 2 <= len(parts) <= 4 or not parts[0]:
        raise argparse.ArgumentTypeError(f"point {spec!r}: expected TRACE:RANKS[:M[:SCHEDULER]]")
    try:
        ranks = int(parts[1])
        m = int(parts[2]) if len(parts) > 2 and parts[2] else default_m
    except ValueError:
        raise argparse.ArgumentTypeError(f"point {spec!r}: RANKS and M must be integers")
    if ranks < 1 or m < 1:
        raise argparse.ArgumentTypeError(f"point {spec!r}: RANKS and M must be positive")
    if len(parts) == 4:
        if parts[3] not in SCHEDULERS:
            raise argparse.ArgumentTypeError(
                f"point {spec!r}: scheduler must be one of {', '.join(SCHEDULERS)}")
        schedulers = [parts[3]]
    return [(parts[0], ranks, m, s) for s in schedulers]


def read_lengths(trace, workloads, dcpack):
    """Lengths of TRACE: a file, a name in the workloads directory (with or without .txt), or a
    workloads.py name (FAMILY_nN_seedS) that dcpack generates number for number."""
    candidates = [trace] if os.sep in trace else []
    candidates += [os.path.join(workloads, trace), os.path.join(workloads, trace + ".txt")]
    for path in candidates:
        if os.path.isfile(path):
            with open(path, encoding="utf-8-sig") as f:
                lines = f.read().splitlines()
            while lines and not lines[-1].strip():
                lines.pop()
            try:
                return [int(x) for x in lines], path
            except ValueError as e:
                raise BenchError(f"{path}: not one integer length per line ({e})")
    m = TRACE_NAME.match(trace_label(trace))
    if not m:
        raise BenchError(f"trace {trace!r}: no such file in {workloads} and not a "
                         "FAMILY_nN_seedS name dcpack can generate")
    spec = f"{m.group(1)}:n={m.group(2)},seed={m.group(3)}"
    r = subprocess.run([dcpack, "generate", spec], capture_output=True, text=True)
    if r.returncode:
        raise BenchError(f"{dcpack} generate {spec} exited {r.returncode}: {r.stderr.strip()}")
    return [int(x) for x in r.stdout.split()], f"dcpack generate {spec}"


def default_cp(lengths, ranks, m):
    """dcpack plan's default for dp_balanced: the smallest CP size dividing N that holds the
    longest sequence."""
    longest = max(lengths)
    for c in range(1, ranks + 1):
        if ranks % c == 0 and c * m >= longest:
            return c
    raise BenchError(f"the longest sequence ({longest}) needs more than {ranks} ranks x {m}")


def trace_label(trace):
    name = os.path.basename(trace)
    return name[:-4] if name.endswith(".txt") else name


def first_difference(a, b):
    if len(a) != len(b):
        return f"{len(a)} microbatches in the reference, {len(b)} in dcpack"
    for i, (ma, mb) in enumerate(zip(a, b)):
        if len(ma) != len(mb):
            return f"microbatch {i}: {len(ma)} ranks in the reference, {len(mb)} in dcpack"
        for r, (ra, rb) in enumerate(zip(ma, mb)):
            if ra != rb:
                k = next((k for k, (x, y) in enumerate(zip(ra, rb)) if x != y), min(len(ra), len(rb)))
                return (f"microbatch {i} rank {r}: {len(ra)} ids in the reference, {len(rb)} in "
                        f"dcpack; from position {k}: reference {ra[k:k + 8]}, dcpack {rb[k:k + 8]}")
    return None


# ---------------------------------------------------------------------------------------------

def machine():
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model or 'unknown CPU'}, {cpus} CPUs available, {platform.system()} {platform.machine()}"


def seconds(x):
    if x >= 1:
        return f"{x:.2f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} us"


def main():
    workloads_default = os.path.join(SOURCE_DIR, "tests", "data", "workloads")
    p = argparse.ArgumentParser(
        description="Planning time of dcpack against the reference schedulers "
                    "(Megatron-LM data_schedule.py), measured in the same run; fails if any "
                    "plan differs.",
        epilog="A point is TRACE:RANKS[:M[:SCHEDULER]]. TRACE is a file, a name in the "
               "workloads directory (with or without .txt), or a workloads.py name "
               "FAMILY_nN_seedS, which dcpack generates when the file is absent. Without "
               "SCHEDULER the point runs with every --schedulers. dp_balanced runs with "
               "cp = --cp, or the smallest CP size dividing RANKS that holds the longest "
               "sequence, and dp = RANKS / cp; dynamic_cp with cp 1, dp = RANKS. "
               "Exit status: 0 every plan identical; 1 a plan differs or a planner failed; "
               "2 usage error.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--megatron", metavar="DIR", help="a Megatron-LM checkout")
    src.add_argument("--megatron-git", metavar="REPO@REV",
                     help="a Megatron-LM git repository (bare or not) and a revision, read "
                          "with git show")
    p.add_argument("--dcpack", default=os.path.join(SOURCE_DIR, "build", "dcpack"),
                   help="the dcpack program (default: build/dcpack of this source tree)")
    p.add_argument("--workloads", default=workloads_default, metavar="DIR",
                   help=f"trace directory (default: {workloads_default})")
    p.add_argument("--points", nargs="+", metavar="POINT", default=list(DEFAULT_POINTS),
                   help="default: " + " ".join(DEFAULT_POINTS))
    p.add_argument("--schedulers", default=",".join(SCHEDULERS),
                   help="comma-separated, for points that name none (default: %(default)s)")
    p.add_argument("--max-seqlen-per-rank", type=int, default=4096, metavar="M",
                   help="for points that name none (default: %(default)s)")
    p.add_argument("--cp", type=int, default=0, help="dp_balanced's CP size (default: see below)")
    p.add_argument("--repeat", type=int, default=1, metavar="R",
                   help="reference plans per point; its time is their median (default: 1)")
    p.add_argument("--dcpack-repeat", type=int, default=21, metavar="K",
                   help="dcpack plans per point, passed as --repeat (default: %(default)s)")
    args = p.parse_args()
    schedulers = [s for s in args.schedulers.split(",") if s]
    if not schedulers or any(s not in SCHEDULERS for s in schedulers):
        p.error(f"--schedulers: each must be one of {', '.join(SCHEDULERS)}")
    if args.repeat < 1 or args.dcpack_repeat < 1 or args.cp < 0 or args.max_seqlen_per_rank < 1:
        p.error("--repeat, --dcpack-repeat and --max-seqlen-per-rank must be positive, --cp >= 0")
    try:
        points = [pt for spec in args.points
                  for pt in parse_point(spec, schedulers, args.max_seqlen_per_rank)]
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if not os.access(args.dcpack, os.X_OK):
        p.error(f"--dcpack {args.dcpack}: not an executable (build it: cmake --build build)")

    try:
        described, sources = reference_sources(args)
        ns = load_reference(sources)
    except BenchError as e:
        print(f"bench_vs_reference: {e}", file=sys.stderr)
        return 1

    print("dcpack planning time against the reference, measured in the same run")
    print(f"machine: {machine()}")
    if hasattr(os, "getloadavg"):
        print("load average at start: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"python: {platform.python_implementation()} {platform.python_version()}")
    print(f"reference: {described}")
    for path in (REF_SCHED, REF_UTILS):
        print(f"  {path} sha256 {hashlib.sha256(sources[path].encode()).hexdigest()[:16]}")
    print(f"dcpack: {os.path.abspath(args.dcpack)}")
    print(f"reference time: median of {args.repeat} get_groups_and_subsamples() "
          f"(time.perf_counter); dcpack time: stats.plan_seconds of "
          f"`dcpack plan --format json --repeat {args.dcpack_repeat}` (median; includes validation)")
    print()

    header = ("| point | scheduler | microbatches | reference | dcpack | speed-up | identical |",
              "|---|---|---:|---:|---:|---:|---|")
    print(*header, sep="\n", flush=True)
    failures, traces = [], {}
    for trace, ranks, m, scheduler in points:
        label = f"{trace_label(trace)}, {ranks} ranks, M {m}"
        try:
            if trace not in traces:
                traces[trace] = read_lengths(trace, args.workloads, args.dcpack)
            lengths = traces[trace][0]
            cp = 1
            if scheduler == "dp_balanced":
                cp = args.cp or default_cp(lengths, ranks, m)
                if ranks % cp:
                    raise BenchError(f"--cp {cp} does not divide {ranks} ranks")
            try:
                ref_s, ref_plan = time_reference(ns, scheduler, lengths, ranks, cp, m, args.repeat)
            except BenchError:
                raise
            except Exception as e:
                raise BenchError(f"the reference failed: {type(e).__name__}: {e}")
            dcp_s, dcp_plan, _ = dcpack_plan(args.dcpack, lengths, scheduler, ranks, cp, m,
                                             args.dcpack_repeat)
        except BenchError as e:
            failures.append(f"{label}, {scheduler}: {e}")
            print(f"| {label} | {scheduler} | - | - | - | - | failed |", flush=True)
            continue
        diff = first_difference(ref_plan, dcp_plan)
        if diff:
            failures.append(f"{label}, {scheduler}: plans differ: {diff}")
        name = scheduler + (f" (cp {cp})" if scheduler == "dp_balanced" else "")
        speedup = f"{ref_s / dcp_s:,.0f}x" if dcp_s > 0 else "-"
        print(f"| {label} | {name} | {len(ref_plan)} | {seconds(ref_s)} | {seconds(dcp_s)} "
              f"| {speedup} | {'no' if diff else 'yes'} |", flush=True)
    print()
    for trace, (lengths, origin) in traces.items():
        print(f"trace {trace}: {origin}: {len(lengths)} sequences, {sum(lengths):,} tokens, "
              f"longest {max(lengths)}")
    if failures:
        print(file=sys.stderr)
        for f in failures:
            print(f"bench_vs_reference: FAILED: {f}", file=sys.stderr)
        return 1
    print(f"all {len(points)} plans identical to the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
