"""The Python snippets of the README and of every page in docs/ run as printed, so the manual stays true.

Every ```python block of a page runs, in order, in one namespace per page (a block may use what
an earlier one on the same page defined; docs/python.md says so where its chain starts, and the
README's blocks each run alone).  A block preceded by ``<!-- doc-test: needs X -->`` runs only where X is
there, and is skipped with a message otherwise: ``torch`` (importable), ``cuda`` (torch with a
GPU and a dcpack built with CUDA and NCCL), ``megatron`` (Megatron-LM importable as ``megatron``), ``megatron-run`` (inside an initialised
Megatron-LM training process: never here, always skipped with that reason).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
DOC = ROOT / "docs" / "python.md"
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
MARK = re.compile(r"<!--\s*doc-test:\s*needs\s+([\w ,-]+?)\s*-->\s*$")


def snippets(page: Path = DOC):
    """(line, needs, code) of every python block of the page."""
    lines = page.read_text().splitlines()
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
    if "megatron-run" in needs:  # needs Megatron-LM's initialised training process (get_args() and friends)
        return "it runs inside a Megatron-LM training process"
    unknown = needs - {"torch", "cuda", "megatron", "megatron-run"}
    if unknown:
        raise AssertionError(f"unknown doc-test needs: {sorted(unknown)}")
    return None


SNIPPETS = snippets()
ALL = [(page, line, needs, code) for page in PAGES for line, needs, code in snippets(page)]


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


@pytest.fixture(scope="module")
def page_namespaces():
    return {}


@pytest.mark.parametrize("page,line,needs,code", [a for a in ALL if a[0] != DOC],
                         ids=[f"{a[0].name}:{a[1]}" for a in ALL if a[0] != DOC])
def test_other_pages_snippets_run(page_namespaces, page, line, needs, code, tmp_path, monkeypatch):
    why = missing(needs)
    if why:
        pytest.skip(f"{page.name} line {line} needs {', '.join(sorted(needs))}: {why}")
    monkeypatch.chdir(ROOT)
    ns = page_namespaces.setdefault(page, {"__name__": f"docs_{page.stem}"})
    exec(compile(code, f"{page.relative_to(ROOT)}:{line}", "exec"), ns)


def test_readme_snippet_prints():
    """The README's first Python block runs alone and shows what it computes."""
    import contextlib
    import io

    line, needs, code = snippets(ROOT / "README.md")[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "readme"})
    assert out.getvalue().strip(), "the README's Python snippet prints nothing"
