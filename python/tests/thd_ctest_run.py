"""The python.thd ctest case: dcpack.thd's tests (test_thd_*.py) in a Python that has torch.

    python thd_ctest_run.py --source SRC --build BUILD [--python PY]

1. The interpreter: the first of $DCPACK_TORCH_PYTHON, --python (CMake's
   DCP_TORCH_PYTHON), ``python3`` on PATH and this interpreter that imports
   torch, numpy and pytest.  None: exit 77 (ctest's skip) with a message.
2. dcpack for it: ``pip install --no-build-isolation --no-deps --no-index --target
   BUILD/python-thd/site SRC`` when that interpreter has scikit-build-core (its CMake
   build kept in BUILD/python-thd/cmake, so later runs rebuild incrementally);
   otherwise the package python.pytest installed in BUILD/python-venv (a cp310
   abi3 module, loadable by any CPython >= 3.10) with this source tree's Python
   files.  Neither: exit 77 with a message.
3. pytest on test_thd_attention.py, test_thd_bench.py and test_thd_equality.py (CPU, gloo).

torch is never installed here (about 3 GB from the package index): point
DCPACK_TORCH_PYTHON, or -DDCP_TORCH_PYTHON=..., at a Python that has it.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SKIP = 77


def log(message: str) -> None:
    print(f"python.thd: {message}", flush=True)


def has(python: str, modules: str) -> bool:
    try:
        r = subprocess.run([python, "-c", f"import {modules}"], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--python", default="")
    a = ap.parse_args()
    source, build = Path(a.source).resolve(), Path(a.build).resolve()
    t0 = time.monotonic()

    candidates = [os.environ.get("DCPACK_TORCH_PYTHON", ""), a.python, shutil.which("python3") or "", sys.executable]
    candidates = [c for i, c in enumerate(candidates) if c and c not in candidates[:i]]
    python = next((c for c in candidates if has(c, "torch, numpy, pytest")), None)
    if python is None:
        log(f"SKIP: no Python with torch, numpy and pytest among {candidates}; set DCPACK_TORCH_PYTHON (or "
            "configure with -DDCP_TORCH_PYTHON=...) to one that has them to run dcpack.thd's tests")
        return SKIP
    log(f"python with torch: {python}")

    env = dict(os.environ)
    env.setdefault("DCPACK_CUDA", "0")
    site = build / "python-thd" / "site"
    if has(python, "scikit_build_core"):
        cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-build-isolation",
               "--no-deps", "--no-index", "--upgrade", "--target", str(site), "-C",
               f"build-dir={build / 'python-thd' / 'cmake'}", str(source)]
        log("$ " + " ".join(cmd))
        if subprocess.run(cmd, env=env).returncode != 0:
            log("FAIL: pip install of the package from the source tree failed")
            return 1
        path = str(site)
    else:
        cores = glob.glob(str(build / "python-venv" / "lib" / "python3*" / "site-packages" / "dcpack" /
                               "_core.abi3.so"))
        if not cores:
            log(f"SKIP: {python} has no scikit-build-core to build dcpack, and python.pytest has not installed "
                f"one in {build / 'python-venv'} yet")
            return SKIP
        overlay = build / "python-thd" / "overlay" / "dcpack"
        if overlay.exists():
            shutil.rmtree(overlay)
        shutil.copytree(source / "python" / "dcpack", overlay)
        for f in ("_core.abi3.so", "_build_config.py"):
            shutil.copy2(Path(cores[0]).parent / f, overlay / f)
        path = str(overlay.parent)
        log(f"using the extension python.pytest built ({cores[0]}) with this tree's Python files")
    env["PYTHONPATH"] = path + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    tests = source / "python" / "tests"
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests / "test_thd_attention.py"),
           str(tests / "test_thd_bench.py"), str(tests / "test_thd_equality.py")]
    log("$ " + " ".join(cmd))
    r = subprocess.run(cmd, cwd=build, env=env)
    log(f"done in {time.monotonic() - t0:.0f} s")
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
