#!/usr/bin/env python3
"""layering.py - check that the library keeps to its layers (docs/internals.md).

    alloc/  <-  core/  <-  pipeline/ and gpu/ (side by side)  <-  api/

Three rules, each checked on the sources and on the built objects, and one on
the file names:

  includes   a file includes headers of its own layer, of the layers it may
             use (build/layers.txt, written by CMake from the same table the
             object libraries are linked by), the public include/, or the system
  symbols    an object's undefined symbols are defined in its own layer, in a
             layer it may use, or outside the library (pipeline/ reaches gpu/'s
             token mover only through core/'s backend table, which api/ fills)
  allocation only alloc/ calls malloc, calloc, realloc, free, jemalloc's or
             CUDA's allocators (in the source, and as undefined symbols)
  names      no file name (with its extension) appears twice in the layers'
             folders, at any depth: a name says what one file holds
  stages     a stage's objects use no symbol another stage defines: the stages
             are the "---- name (file.c) ----" / "---- name (dir/) ----"
             sections of pipeline/stages.h, and only the drivers (step.c,
             plan_compute.c, ...) compose them

    layering.py --source DIR --build DIR           check the tree; exit 1 on a violation
    layering.py --source DIR --build DIR --plant   plant one violation of each rule in a
                                                   copy and check that each is caught
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

LAYER_DIRS = {"alloc": "alloc", "core": "core", "pipeline": "pipeline", "gpu": "gpu", "api": "api"}
SOURCE_SUFFIXES = (".c", ".h", ".cu", ".cuh")
ALLOCATORS = ("malloc", "calloc", "realloc", "free", "aligned_alloc", "posix_memalign", "valloc", "strdup",
              "strndup", "mallocx", "rallocx", "dallocx", "sdallocx", "cudaMalloc", "cudaMallocHost",
              "cudaMallocManaged", "cudaMallocAsync", "cudaHostAlloc", "cudaFree", "cudaFreeHost", "cudaFreeAsync")
ALLOC_CALL = re.compile(r"\b(" + "|".join(ALLOCATORS) + r")\s*\(")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_graph(build):
    graph = {}
    with open(os.path.join(build, "layers.txt")) as f:
        for line in f:
            if ":" not in line:
                continue
            layer, deps = line.split(":", 1)
            graph[layer.strip()] = deps.split()
    return graph


def layer_files(source, layer):
    root = os.path.join(source, LAYER_DIRS[layer])
    for dirpath, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.join(dirpath, name)


def layer_of(source, path):
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(source))
    top = rel.split(os.sep)[0]
    for layer, d in LAYER_DIRS.items():
        if top == d:
            return layer
    return None


def strip_comments_and_strings(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(\\.|[^"\\])*"', '""', text)


def check_includes(source, graph):
    problems = []
    for layer in graph:
        allowed = {layer, *graph[layer]}
        for path in layer_files(source, layer):
            with open(path, errors="replace") as f:
                text = f.read()
            for name in INCLUDE.findall(text):
                target = os.path.join(os.path.dirname(path), name)
                if not os.path.exists(target):
                    if os.path.exists(os.path.join(source, "include", name)):
                        continue  # the public header
                    problems.append(f"{os.path.relpath(path, source)}: includes \"{name}\", which is not in the tree")
                    continue
                other = layer_of(source, target)
                if other is not None and other not in allowed:
                    problems.append(f"{os.path.relpath(path, source)}: layer {layer} includes \"{name}\" of layer "
                                    f"{other} (allowed: {' '.join(sorted(allowed))})")
    return problems


def check_allocation_calls(source, graph):
    problems = []
    for layer in graph:
        if layer == "alloc":
            continue
        for path in layer_files(source, layer):
            with open(path, errors="replace") as f:
                text = strip_comments_and_strings(f.read())
            for m in ALLOC_CALL.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"{os.path.relpath(path, source)}:{line}: layer {layer} calls {m.group(1)}(); "
                                "only alloc/ may")
    return problems


def nm_symbols(objects):
    """(defined, undefined) symbol sets of a list of object files."""
    defined, undefined = set(), set()
    if not objects:
        return defined, undefined
    out = subprocess.run(["nm", "-P", *objects], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0].endswith(":"):
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind not in ("w", "v"):
            defined.add(name)
    return defined, undefined


def read_objects(build, layer):
    with open(os.path.join(build, f"layer_objects_{layer}.txt")) as f:
        return [line.strip() for line in f if line.strip()]


def check_symbols(source, graph, objects):
    problems = []
    symbols = {layer: nm_symbols(objects[layer]) for layer in graph}
    for layer in graph:
        allowed = {layer, *graph[layer]}
        _, undefined = symbols[layer]
        for name in sorted(undefined):
            owners = [other for other in graph if name in symbols[other][0]]
            if not owners or any(o in allowed for o in owners):
                continue  # outside the library, or provided by a layer it may use
            owner = owners[0]
            problems.append(f"layer {layer} uses {name}, defined only in layer {owner}")
        if layer != "alloc":
            for name in sorted(undefined):
                if name in ALLOCATORS:
                    problems.append(f"layer {layer} objects call {name}; only alloc/ may")
    return problems


def check_file_names(source):
    problems = []
    seen = {}
    for layer in LAYER_DIRS:
        for path in layer_files(source, layer):
            rel = os.path.relpath(path, source)
            seen.setdefault(os.path.basename(path), []).append(rel)
    for name, paths in sorted(seen.items()):
        if len(paths) > 1:
            problems.append(f"file name {name} repeats: {' and '.join(paths)}")
    return problems


STAGE_SECTION = re.compile(r"^/\* ---- (\w+) \(([\w./]+)\) ---- \*/$", re.M)


def read_stages(source):
    """{stage: [paths under pipeline/ (a file, or a folder ending in /)]} from pipeline/stages.h's sections."""
    with open(os.path.join(source, "pipeline", "stages.h")) as f:
        text = f.read()
    stages = {}
    for name, where in STAGE_SECTION.findall(text):
        stages.setdefault(name, []).append(where)
    return stages


def stage_of_object(stages, obj):
    """The stage an object of pipeline/ was compiled from, or None (a driver, or a file of no stage)."""
    path = obj.replace(os.sep, "/")
    if path.endswith(".o"):
        path = path[:-2]
    marker = "/pipeline/"
    if marker not in path:
        return None
    rel = path[path.rindex(marker) + len(marker):]
    for name, places in stages.items():
        for where in places:
            if (where.endswith("/") and rel.startswith(where)) or rel == where:
                return name
    return None


def check_stages(source, objects):
    stages = read_stages(source)
    if len(stages) < 2:
        return [f"pipeline/stages.h names {len(stages)} stage(s) in its '---- name (file) ----' sections"]
    by_stage = {}
    for obj in objects:
        name = stage_of_object(stages, obj)
        if name is not None:
            by_stage.setdefault(name, []).append(obj)
    empty = sorted(name for name in stages if name not in by_stage)
    if empty:
        return [f"stage {' '.join(empty)} of pipeline/stages.h has no object in the pipeline layer"]
    symbols = {name: nm_symbols(objs) for name, objs in by_stage.items()}
    problems = []
    for name, (_, undefined) in sorted(symbols.items()):
        for sym in sorted(undefined):
            owners = [other for other, (defined, _) in symbols.items() if other != name and sym in defined]
            if owners:
                problems.append(f"stage {name} uses {sym} of stage {owners[0]}; the driver composes stages")
    return problems


def check(source, build, objects=None):
    graph = read_graph(build)
    missing = [layer for layer in LAYER_DIRS if layer not in graph]
    if missing:
        return [f"build/layers.txt has no layer {' '.join(missing)}"]
    if objects is None:
        objects = {layer: read_objects(build, layer) for layer in graph}
    return (check_includes(source, graph) + check_allocation_calls(source, graph) +
            check_symbols(source, graph, objects) + check_file_names(source) +
            check_stages(source, objects["pipeline"]))


def plant(source, build):
    """Plant one violation of each rule in a copy of the layers; each must be caught, the copy unplanted not."""
    graph = read_graph(build)
    objects = {layer: read_objects(build, layer) for layer in graph}
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "src")
        for d in list(LAYER_DIRS.values()) + ["include"]:
            shutil.copytree(os.path.join(source, d), os.path.join(copy, d))
        baseline = check(copy, build, objects)
        if baseline:
            print("layering: the unplanted copy already fails:\n  " + "\n  ".join(baseline))
            return 1
        victim = os.path.join(copy, "core", "config.c")
        with open(victim) as f:
            original = f.read()

        def expect(kind, problems, needle):
            nonlocal failures
            hits = [p for p in problems if needle in p]
            if hits:
                print(f"layering: planted {kind} caught: {hits[0]}")
            else:
                print(f"layering: planted {kind} NOT caught (problems: {problems})")
                failures += 1

        with open(victim, "w") as f:
            f.write(original + '\n#include "../pipeline/context.h"\n')
        expect("include of pipeline/context.h in core/config.c", check(copy, build, objects),
               'layer core includes "../pipeline/context.h"')
        with open(victim, "w") as f:
            f.write(original + "\nvoid *dcp__planted(void) { return malloc(8); }\n")
        expect("malloc call in core/config.c", check(copy, build, objects), "layer core calls malloc()")
        with open(victim, "w") as f:
            f.write(original)

        # a pipeline/ file named as a core/ one, at another depth
        planted_name = os.path.join(copy, "pipeline", "assign", "config.c")
        with open(planted_name, "w") as f:
            f.write("/* planted */\n")
        expect("pipeline/assign/config.c beside core/config.c", check(copy, build, objects),
               "file name config.c repeats: core/config.c and pipeline/assign/config.c")
        os.remove(planted_name)

        # an object of core that calls a pipeline function, and one that calls free
        planted_c = os.path.join(tmp, "planted.c")
        with open(planted_c, "w") as f:
            f.write("int dcp__step_scratch_size(const void *config);\nvoid free(void *p);\n"
                    "int dcp__planted_up(void) { return dcp__step_scratch_size(0); }\n"
                    "void dcp__planted_free(void *p) { free(p); }\n")
        planted_o = os.path.join(tmp, "planted.o")
        subprocess.run([os.environ.get("CC", "cc"), "-c", planted_c, "-o", planted_o], check=True)
        planted_objects = dict(objects)
        planted_objects["core"] = objects["core"] + [planted_o]
        problems = check(copy, build, planted_objects)
        expect("core object calling dcp__step_scratch_size (pipeline)", problems,
               "layer core uses dcp__step_scratch_size, defined only in layer pipeline")
        expect("core object calling free", problems, "layer core objects call free")

        # a pipeline object that names the CUDA mover's backend itself (gpu/mover_cuda.h declares it; api/ alone may name it)
        sibling_c = os.path.join(tmp, "sibling.c")
        with open(sibling_c, "w") as f:
            f.write("extern const int dcp__mover_backend_cuda;\n"
                    "const void *dcp__planted_sibling(void) { return &dcp__mover_backend_cuda; }\n")
        sibling_o = os.path.join(tmp, "sibling.o")
        subprocess.run([os.environ.get("CC", "cc"), "-c", sibling_c, "-o", sibling_o], check=True)
        planted_objects = dict(objects)
        planted_objects["pipeline"] = objects["pipeline"] + [sibling_o]
        expect("pipeline object naming dcp__mover_backend_cuda (gpu)", check(copy, build, planted_objects),
               "layer pipeline uses dcp__mover_backend_cuda, defined only in layer gpu")

        # a pack object that calls strip's function (stages.h: pack is pipeline/pack.c, strip pipeline/strip.c)
        os.makedirs(os.path.join(tmp, "obj", "pipeline"))
        stage_c = os.path.join(tmp, "stage.c")
        with open(stage_c, "w") as f:
            f.write("unsigned dcp__strip_fields(const void *config, int pipeline_rank, unsigned mtp);\n"
                    "unsigned dcp__planted_stage(void) { return dcp__strip_fields(0, 0, 0); }\n")
        stage_o = os.path.join(tmp, "obj", "pipeline", "pack.c.o")
        subprocess.run([os.environ.get("CC", "cc"), "-c", stage_c, "-o", stage_o], check=True)
        planted_objects = dict(objects)
        planted_objects["pipeline"] = objects["pipeline"] + [stage_o]
        expect("pack stage object calling dcp__strip_fields (strip stage)", check(copy, build, planted_objects),
               "stage pack uses dcp__strip_fields of stage strip")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--plant", action="store_true")
    args = ap.parse_args()
    if args.plant:
        return plant(args.source, args.build)
    problems = check(args.source, args.build)
    for p in problems:
        print("layering: " + p)
    if not problems:
        graph = read_graph(args.build)
        print("layering: " + "; ".join(f"{l} -> {' '.join(graph[l]) or '(nothing)'}" for l in graph) + ": kept")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
