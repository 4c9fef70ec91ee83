"""Load Megatron-LM's scheduling code from a checkout, at run time, without torch or the rest of Megatron.

Only two files of the checkout are executed as they are:
``megatron/core/datasets/data_schedule_utils.py`` and
``megatron/core/datasets/data_schedule.py``.  Their imports of torch and of
other megatron.core modules are satisfied by empty stand-in modules while the
two files load, then sys.modules is restored.  The scheduling functions
(``DpBalancedScheduler.get_groups_and_subsamples``,
``DefaultDynamicCPScheduler.get_groups_and_subsamples``,
``next_hdp_group_packing_aware``, ``align_sample_id_groups``) use plain Python
only, so what runs is Megatron's own code.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path


class _Anything:
    """Stands for any class, function or constant the two files name at import time."""

    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return _Anything()

    def __getattr__(self, name):
        return _Anything()


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (_Anything,), {})
        setattr(self, name, value)
        return value


STUBS = [
    "torch", "torch.distributed",
    "megatron", "megatron.core", "megatron.core.parallel_state", "megatron.core.datasets",
    "megatron.core.extensions", "megatron.core.extensions.transformer_engine",
    "megatron.core.rerun_state_machine", "megatron.core.packed_seq_params",
    "megatron.core.pipeline_parallel", "megatron.core.pipeline_parallel.hybrid_cp_schedule",
    "megatron.core.process_groups_config", "megatron.core.transformer",
    "megatron.core.transformer.multi_token_prediction",
]


def load(root: str):
    """(data_schedule, data_schedule_utils) modules loaded from the checkout at ``root``."""
    base = Path(root) / "megatron" / "core" / "datasets"
    saved = {name: sys.modules.get(name) for name in STUBS + ["megatron.core.datasets.data_schedule_utils",
                                                               "megatron.core.datasets.data_schedule"]}
    try:
        for name in STUBS:
            m = _StubModule(name)
            m.__path__ = []  # a package, so submodules resolve
            sys.modules[name] = m
        loaded = []
        for short in ("data_schedule_utils", "data_schedule"):
            full = f"megatron.core.datasets.{short}"
            spec = importlib.util.spec_from_file_location(full, base / f"{short}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[full] = module
            spec.loader.exec_module(module)
            setattr(sys.modules["megatron.core.datasets"], short, module)
            loaded.append(module)
        return loaded[1], loaded[0]
    finally:
        for name, m in saved.items():
            if m is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = m
