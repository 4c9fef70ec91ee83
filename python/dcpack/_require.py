"""What the optional parts of dcpack need, said as what to install."""

from __future__ import annotations

import importlib
from types import ModuleType


def require_torch(part: str) -> ModuleType:
    """``import torch`` for ``part`` (e.g. ``"dcpack.thd"``), or a ModuleNotFoundError that says what to install."""
    try:
        return importlib.import_module("torch")
    except ImportError as e:
        raise ModuleNotFoundError(
            f"{part} needs PyTorch, which this Python ({_python()}) cannot import: install it with "
            f"'pip install torch' (see docs/python.md, install); the import failed with: {e}",
            name="torch",
        ) from e


def _python() -> str:
    import sys

    return sys.executable or "python"
