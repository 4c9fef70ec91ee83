"""The python.pytest ctest case: install the package from the source tree into a venv, run pytest.

    python ctest_run.py --source SRC --build BUILD [--plan-hash PATH]

1. A virtual environment under BUILD/python-venv (kept between runs).
2. pip installs numpy, pytest and scikit-build-core into it, then the dcpack
   package from SRC (``pip install --no-build-isolation``, its CMake build
   folder kept under BUILD/python-build so later runs rebuild incrementally).
3. pytest runs SRC/python/tests with DCPACK_PLAN_HASH pointing at the
   dcp_plan_hash program of this build (plans compared with the C library's).

Exits 77 (ctest's SKIP_RETURN_CODE for this case) only when pip cannot reach
the package index and the venv does not already hold what the tests need, or
when this Python cannot create a virtual environment (Debian: python3-venv).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

SKIP = 77
NEEDS = ["numpy", "pytest", "scikit-build-core>=0.10"]


def log(message: str) -> None:
    print(f"python.pytest: {message}", flush=True)


def run(cmd, **kw) -> subprocess.CompletedProcess:
    log("$ " + " ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], **kw)


def index_reachable(python: Path) -> bool:
    """Whether pip's configured index answers (PIP_INDEX_URL, pip config, else PyPI)."""
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        r = subprocess.run([str(python), "-m", "pip", "config", "get", "global.index-url"], capture_output=True,
                           text=True)
        url = r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "https://pypi.org/simple/"
    try:
        with urllib.request.urlopen(url, timeout=15) as response:
            return response.status < 500
    except Exception as e:  # noqa: BLE001 - any failure means unreachable
        log(f"package index {url} unreachable: {e}")
        return False


def has_modules(python: Path) -> bool:
    r = subprocess.run([str(python), "-c", "import numpy, pytest, scikit_build_core"], capture_output=True)
    return r.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--plan-hash", default="")
    a = ap.parse_args()
    source, build = Path(a.source).resolve(), Path(a.build).resolve()
    venv = build / "python-venv"
    python = venv / "bin" / "python"
    t0 = time.monotonic()

    if not python.exists():
        r = run([sys.executable, "-m", "venv", venv])
        if r.returncode != 0 or not python.exists():
            log(f"SKIP: {sys.executable} cannot create a virtual environment (on Debian/Ubuntu: apt-get install "
                "python3-venv); the Python package tests need one")
            return SKIP

    r = run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *NEEDS])
    if r.returncode != 0:
        if has_modules(python):
            log("pip could not update the test requirements; using those already in the venv")
        elif not index_reachable(python):
            log("SKIP: pip cannot reach the package index, so numpy, pytest and scikit-build-core cannot be "
                "installed; the Python package tests did not run")
            return SKIP
        else:
            log("FAIL: pip could not install the test requirements although the index answers")
            return 1

    env = dict(os.environ)
    # the wheel is CPU-only unless asked otherwise (DCPACK_CUDA=1 builds the CUDA kernels)
    env.setdefault("DCPACK_CUDA", "0")
    r = run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-build-isolation",
             "--no-deps", "--force-reinstall", "-C", f"build-dir={build / 'python-build'}", source], env=env)
    if r.returncode != 0:
        log("FAIL: pip install of the package from the source tree failed")
        return 1
    log(f"package installed in {time.monotonic() - t0:.0f} s")

    if a.plan_hash:
        env["DCPACK_PLAN_HASH"] = a.plan_hash
    # run from the build folder so `import dcpack` is the installed package, not the source tree
    r = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", source / "python" / "tests"], cwd=build,
            env=env)
    log(f"done in {time.monotonic() - t0:.0f} s")
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
