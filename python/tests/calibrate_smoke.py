"""The python.calibrate_smoke ctest case: python -m dcpack.calibrate end to end on the CPU, tiny shapes.

    python calibrate_smoke.py --source SRC --build BUILD [--dcpack PATH] [--python PY]

1. A Python with torch, found as python.thd finds it: the first of $DCPACK_TORCH_PYTHON, --python
   (CMake's DCP_TORCH_PYTHON), python3 on PATH and this interpreter that imports torch and numpy.
   None: prints SKIP with the reason and exits 77 (ctest's SKIP_RETURN_CODE).
2. The package from SRC installed with that Python into BUILD/python-torch-site (pip --target,
   offline, no build isolation; its CMake folder BUILD/python-torch-build kept between runs).
   A Python that cannot build it (no scikit-build-core) is a skip as well, with the reason.
3. One rank, CP 1, with --check-steps; then two ranks over gloo (torchrun) with --max-cp 2.  Each
   must write a profile that `dcpack cost --profile` takes, with time_unit_ps = 1, one measured
   microbatch per grid point, errors that agree with the profile's own predictions, and composed
   step times with dependency <= barrier.  Timings on a shared CPU say nothing about a GPU: only
   the pipeline is checked here (docs/calibration.md has the GPU numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SKIP = 77
MODEL = ["--layers", "1", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--vocab", "128",
         "--device", "cpu", "--warmup", "1", "--repeats", "3"]


def torch_python(configured: str) -> tuple[str | None, list[str]]:
    """The first Python with torch and numpy among python.thd's candidates (thd_ctest_run.py)."""
    venv = Path(os.environ.get("DCPACK_TORCH_VENV") or Path.home() / ".cache" / "dcpack" / "torch-venv")
    candidates = [os.environ.get("DCPACK_TORCH_PYTHON", ""), configured, str(venv / "bin" / "python"),
                  shutil.which("python3") or "", sys.executable]
    candidates = [c for c in candidates if not c or Path(c).exists() or os.sep not in c]
    candidates = [c for i, c in enumerate(candidates) if c and c not in candidates[:i]]
    for candidate in candidates:
        try:
            r = subprocess.run([candidate, "-c", "import torch, numpy"], capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return candidate, candidates
    return None, candidates


def check_run(out: Path, expect_cps: list[int], tokens: list[int], dcpack: str | None) -> None:
    """Run by the torch Python (--check), with the installed package on its path."""
    doc = json.loads((out.with_suffix(".json")).read_text())
    profile_text = out.read_text()
    from dcpack import calibrate as cal

    prof = cal.load_profile(str(out))
    assert prof.time_unit_ps == 1, profile_text
    assert doc["cp_sizes"] == expect_cps, doc["cp_sizes"]
    expected = sum(len(cal.length_mixes(t * cp, granule=max(64, 2 * cp))) for cp in expect_cps for t in tokens)
    samples = [cal.Sample(cp=s["cp"], lengths=tuple(s["lengths"]), time_ps=s["time_ps"], label=s["label"])
               for s in doc["samples"]]
    assert len(samples) == expected, (len(samples), expected)
    assert all(s.time_ps > 0 for s in samples)
    # the errors reported are the written profile's (barrier step model aside, the same coefficients)
    for s, err, pred in zip(samples, doc["errors"], doc["predicted_ps"]):
        assert cal.predict(prof.cost, s) == pred, (s.label, pred)
        assert abs((pred - s.time_ps) / s.time_ps - err) < 1e-9
    # shapes timed again before the fit: at most --retime (8), each now at its second timing, and said so
    by_label = {s.label: s for s in samples}
    assert len(doc["retimed"]) <= 8 and "re-timed before the fit" in profile_text, profile_text
    for r in doc["retimed"]:
        assert by_label[r["label"]].time_ps == r["again_ps"], r
        assert r["label"] in profile_text
    for row in doc["steps"]:
        assert row["wall_ms"] > 0 and row["composed_dependency_ms"] <= row["composed_barrier_ms"] + 1e-9, row
        assert row["model_barrier_ms"] is not None and row["model_dependency_ms"] <= row["model_barrier_ms"] + 1e-9
    if dcpack:
        r = subprocess.run([dcpack, "cost", "--profile", str(out), "--format", "json"], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["model"]["quadratic"] == prof.cost.quadratic


def check(python: str, env: dict, a: argparse.Namespace, out: Path, cps: list[int], tokens: list[int]) -> bool:
    cmd = [python, __file__, "--source", a.source, "--build", a.build, "--check", str(out),
           "--cps", ",".join(map(str, cps)), "--tokens", ",".join(map(str, tokens))]
    if a.dcpack:
        cmd += ["--dcpack", a.dcpack]
    if subprocess.run(cmd, env=env).returncode != 0:
        print(f"FAIL: {out} does not check out")
        return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--dcpack", default=None, help="the dcpack program, to load the written profiles")
    ap.add_argument("--python", default="", help="CMake's DCP_TORCH_PYTHON: a Python with torch")
    ap.add_argument("--check", default=None, help=argparse.SUPPRESS)  # PROFILE CPS TOKENS: check one run
    ap.add_argument("--cps", default="1", help=argparse.SUPPRESS)
    ap.add_argument("--tokens", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.check:
        check_run(Path(a.check), [int(x) for x in a.cps.split(",")], [int(x) for x in a.tokens.split(",")],
                  a.dcpack)
        print(f"checked {a.check}")
        return 0
    python, candidates = torch_python(a.python)
    if python is None:
        print(f"SKIP: no Python with torch and numpy among {candidates}; set DCPACK_TORCH_PYTHON (or configure "
              "with -DDCP_TORCH_PYTHON=...) to one that has them to run python -m dcpack.calibrate")
        return SKIP
    build = Path(a.build).resolve()
    site, cmake_dir = build / "python-torch-site", build / "python-torch-build"
    r = subprocess.run([python, "-c", "import scikit_build_core"], capture_output=True)
    if r.returncode != 0:
        print(f"SKIP: {python} has torch but not scikit-build-core, so it cannot build the package here")
        return SKIP
    shutil.rmtree(site, ignore_errors=True)
    cmd = [python, "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation", "--no-deps", "--target",
           str(site), f"--config-settings=build-dir={cmake_dir}", a.source]
    print("$ " + " ".join(cmd), flush=True)
    if subprocess.run(cmd).returncode != 0:
        print("FAIL: the package did not build with the torch Python")
        return 1
    env = dict(os.environ, PYTHONPATH=str(site), PYTHONUNBUFFERED="1", DCPACK_CALIBRATE_THREADS="1")
    r = subprocess.run([python, "-c", "import dcpack.thd"], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"SKIP: the reference transformer dcpack.thd does not import: {r.stderr.strip().splitlines()[-1:]}")
        return SKIP
    work = build / "calibrate-smoke"
    work.mkdir(exist_ok=True)

    one = work / "one.profile"
    tokens = [256, 512, 1024]
    cmd = [python, "-m", "dcpack.calibrate", *MODEL, "--tokens", ",".join(map(str, tokens)), "--check-steps", "2",
           "--max-seqlen", "512", "--microbatches", "3", "--steps", "2", "--out", str(one),
           "--json", str(one.with_suffix(".json"))]
    print("$ " + " ".join(cmd), flush=True)
    if subprocess.run(cmd, env=env, cwd=work, timeout=600).returncode != 0:
        print("FAIL: python -m dcpack.calibrate (one rank)")
        return 1
    if not check(python, env, a, one, [1], tokens):
        return 1

    torchrun = Path(python).parent / "torchrun"
    two = work / "two.profile"
    tokens = [256, 512]
    cmd = [str(torchrun) if torchrun.exists() else python, *([] if torchrun.exists() else ["-m", "torch.distributed.run"]),
           "--nproc-per-node", "2", "-m", "dcpack.calibrate", *MODEL, "--max-cp", "2",
           "--tokens", ",".join(map(str, tokens)), "--check-steps", "1", "--max-seqlen", "512", "--microbatches", "3",
           "--steps", "1", "--out", str(two), "--json", str(two.with_suffix(".json"))]
    print("$ " + " ".join(cmd), flush=True)
    if subprocess.run(cmd, env=env, cwd=work, timeout=600).returncode != 0:
        print("FAIL: torchrun --nproc-per-node 2 -m dcpack.calibrate --max-cp 2 (gloo)")
        return 1
    if not check(python, env, a, two, [1, 2], tokens):
        return 1
    print("calibrate smoke: ok (one rank, CP 1; two ranks over gloo, CP 1 and 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
