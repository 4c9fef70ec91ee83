"""The optional parts say what to install when torch or Megatron-LM is missing.

Each case runs in a fresh interpreter with the missing package blocked (``sys.modules[name] = None``
makes ``import name`` fail), so it checks the message whether or not the package is installed here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import dcpack

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(dcpack.__file__).parent.parent), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120)


BLOCK_TORCH = "import sys; sys.modules['torch'] = None; sys.modules['torch.distributed'] = None\n"


@pytest.mark.parametrize("module", ["dcpack.thd", "dcpack.torch"])
def test_import_without_torch_says_what_to_install(module):
    r = _run(BLOCK_TORCH + f"import {module}")
    assert r.returncode != 0
    assert "ModuleNotFoundError" in r.stderr, r.stderr
    assert f"{module} needs PyTorch" in r.stderr and "pip install torch" in r.stderr, r.stderr


def test_data_path_without_torch_says_what_to_install():
    r = _run(BLOCK_TORCH + "import dcpack, dcpack.megatron as m\nm.DataPath(dcpack.Config())")
    assert r.returncode != 0
    assert "dcpack.megatron.DataPath needs PyTorch" in r.stderr and "pip install torch" in r.stderr, r.stderr


def test_install_without_megatron_says_what_to_install():
    r = _run("import sys; sys.modules['megatron'] = None\nimport dcpack.megatron as m\nm.install()")
    assert r.returncode != 0
    assert "needs Megatron-LM" in r.stderr and "d48bd6be0a85" in r.stderr and "PYTHONPATH" in r.stderr, r.stderr


@pytest.mark.parametrize("script", ["python/tests/thd_equality.py", "bench/training/bench_train_step.py"])
def test_help_works_without_torch(script):
    path = ROOT / script
    code = BLOCK_TORCH + f"import runpy, sys; sys.argv = [{str(path)!r}, '--help']; runpy.run_path({str(path)!r}, run_name='__main__')"
    r = _run(code)
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout, r.stdout


def test_equality_script_without_torch_says_what_it_needs():
    path = ROOT / "python/tests/thd_equality.py"
    code = BLOCK_TORCH + f"import runpy, sys; sys.argv = [{str(path)!r}, '--out', 'x']; runpy.run_path({str(path)!r}, run_name='__main__')"
    r = _run(code)
    assert r.returncode != 0 and "needs torch" in r.stderr, r.stderr


def test_planner_warns_on_ranks_not_a_power_of_two():
    with pytest.warns(UserWarning, match="3 DPxCP ranks is not a power of two"):
        dcpack.Planner(data_parallel_size=3)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dcpack.Planner(data_parallel_size=4)
        dcpack.Planner(data_parallel_size=3, scheduler="dp_balanced")  # static groups: no fallback
