"""The Python snippets of docs/python.md run as printed, so the manual stays true.

Every ```python block of the page runs, in order, in one namespace (a block may use what an
earlier one defined).  A block preceded by ``<!-- doc-test: needs X -->`` runs only where X is
there, and is skipped with a message otherwise: ``torch`` (importable), ``cuda`` (torch with a
GPU and a dcpack built with CUDA and NCCL), ``megatron`` (Megatron-LM importable as ``megatron``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent.parent / "docs" / "python.md"
MARK = re.compile(r"<!--\s*doc-test:\s*needs\s+([\w ,]+?)\s*-->\s*$")


def snippets():
    """(line, needs, code) of every python block of the page."""
    lines = DOC.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            needs = set()
            j = i - 1
            while j >= 0 and not lines[j].strip():
                j -= 1
            m = MARK.match(lines[j].strip()) if j >= 0 else None
            if m:
                needs = {w.strip() for w in m.group(1).replace(",", " ").split()}
            end = next(k for k in range(i + 1, len(lines)) if lines[k].strip() == "```")
            out.append((i + 1, needs, "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return out


def missing(needs):
    """Why a block cannot run here, or None."""
    import importlib.util

    if needs & {"torch", "cuda"} and importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    if "cuda" in needs:
        import dcpack
        import torch

        if not torch.cuda.is_available():
            return "no CUDA device"
        if not (dcpack.HAVE_CUDA and dcpack.HAVE_NCCL):
            return "dcpack was built without CUDA and NCCL"
    if "megatron" in needs and importlib.util.find_spec("megatron") is None:
        return "Megatron-LM is not importable (megatron)"
    unknown = needs - {"torch", "cuda", "megatron"}
    if unknown:
        raise AssertionError(f"unknown doc-test needs: {sorted(unknown)}")
    return None


SNIPPETS = snippets()


def test_the_page_has_snippets():
    assert len(SNIPPETS) >= 4
    assert any(not needs for _, needs, _ in SNIPPETS)


@pytest.fixture(scope="module")
def namespace():
    return {"__name__": "docs_python_md"}


@pytest.mark.parametrize("line,needs,code", SNIPPETS, ids=[f"line{line}" for line, _, _ in SNIPPETS])
def test_snippet_runs(namespace, line, needs, code):
    why = missing(needs)
    if why:
        pytest.skip(f"docs/python.md line {line} needs {', '.join(sorted(needs))}: {why}")
    exec(compile(code, f"docs/python.md:{line}", "exec"), namespace)
