"""Load Megatron-LM's data-scheduling code from a checkout, at run time; nothing of Megatron is in this repository.

:func:`load` (test_megatron.py, no torch needed) executes two files of the
checkout as they are: ``megatron/core/datasets/data_schedule_utils.py`` and
``megatron/core/datasets/data_schedule.py``.  Their imports of torch and of
other megatron.core modules are satisfied by empty stand-in modules while the
two files load, then sys.modules is restored.  The scheduling functions
(``DpBalancedScheduler.get_groups_and_subsamples``,
``DefaultDynamicCPScheduler.get_groups_and_subsamples``,
``next_hdp_group_packing_aware``, ``align_sample_id_groups``) use plain Python
only, so what runs is Megatron's own code.

:func:`load_data_path` (test_megatron_wrap.py, test_megatron_gpu.py) executes
those two and ``megatron/core/packed_seq_params.py`` with real torch, for
Megatron's whole packed data path; its docstring lists the stand-ins.
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


# --------------------------------------------------------------------------
# The data path: the same two files and packed_seq_params.py, with real torch
# --------------------------------------------------------------------------

DATA_PATH_FILES = ("megatron/core/packed_seq_params.py", "megatron/core/datasets/data_schedule_utils.py",
                   "megatron/core/datasets/data_schedule.py")
"""The files of the checkout executed as they are by :func:`load_data_path`."""


class RerunDataIterator:
    """Stand-in for megatron.core.rerun_state_machine.RerunDataIterator with the rerun machine disabled.

    Megatron's class then only forwards ``next()`` to the iterator it wraps
    (it saves microbatches only when the rerun mode is not DISABLED); so does this.
    """

    def __init__(self, iterable):
        self.iterable = iterable

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.iterable)


def get_thd_partitioned_indices(cu_seqlens, total_tokens, cp_size, cp_rank):
    """Stand-in for megatron.core.extensions.transformer_engine.get_thd_partitioned_indices.

    Megatron's function checks TransformerEngine's version and returns
    ``transformer_engine_torch.thd_get_partitioned_indices(...)``; this calls
    the same TransformerEngine function, and raises when TransformerEngine is
    not installed (zigzag CP slicing with CP > 1 needs it).
    """
    try:
        import transformer_engine_torch as tex
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise RuntimeError("zigzag THD CP slicing needs TransformerEngine (transformer_engine_torch), "
                           "which is not installed") from e
    return tex.thd_get_partitioned_indices(cu_seqlens, total_tokens, cp_size, cp_rank)


def have_transformer_engine() -> bool:
    try:
        import transformer_engine_torch  # noqa: F401
    except ImportError:
        return False
    return True


def load_data_path(root: str, parallel_state, mtp_on_this_rank):
    """Megatron-LM's sequence-packing data path from the checkout at ``root``, with real torch.

    Executes, unchanged, ``megatron/core/packed_seq_params.py``,
    ``megatron/core/datasets/data_schedule_utils.py`` and
    ``megatron/core/datasets/data_schedule.py``, and registers them in
    sys.modules under their names, with these stand-ins for what they import
    from the rest of Megatron:

    - ``megatron.core.parallel_state``: ``parallel_state``, the caller's module
      (the process groups of the test's layout);
    - ``megatron.core.transformer.multi_token_prediction.mtp_on_this_rank``:
      ``mtp_on_this_rank``, the caller's function;
    - ``megatron.core.rerun_state_machine.RerunDataIterator``: :class:`RerunDataIterator`
      (the rerun machine disabled);
    - ``megatron.core.extensions.transformer_engine.get_thd_partitioned_indices``:
      :func:`get_thd_partitioned_indices` (TransformerEngine's own function when installed);
    - ``BalancedCPScheduler`` and ``ProcessGroupCollection``: empty placeholders
      (the first is used only by ``HybridCPDataLoaderWrapper``, the second only
      in annotations).

    Returns (data_schedule, data_schedule_utils, packed_seq_params).  The
    modules stay registered until :func:`unload_data_path` (DataPath.get_batch
    imports ``megatron.core.parallel_state`` and ``megatron.core.packed_seq_params``
    at call time).
    """
    global _SAVED
    names = ["megatron", "megatron.core", "megatron.core.datasets", "megatron.core.parallel_state",
             "megatron.core.extensions", "megatron.core.extensions.transformer_engine",
             "megatron.core.rerun_state_machine", "megatron.core.pipeline_parallel",
             "megatron.core.pipeline_parallel.hybrid_cp_schedule", "megatron.core.process_groups_config",
             "megatron.core.transformer", "megatron.core.transformer.multi_token_prediction",
             "megatron.core.packed_seq_params", "megatron.core.datasets.data_schedule_utils",
             "megatron.core.datasets.data_schedule"]
    if _SAVED is None:
        _SAVED = {name: sys.modules.get(name) for name in names}

    def package(name):
        m = types.ModuleType(name)
        m.__path__ = []
        sys.modules[name] = m
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, m)
        return m

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
        parent, _, child = name.rpartition(".")
        setattr(sys.modules[parent], child, m)
        return m

    for name in ("megatron", "megatron.core", "megatron.core.datasets", "megatron.core.extensions",
                 "megatron.core.pipeline_parallel", "megatron.core.transformer"):
        package(name)
    sys.modules["megatron.core.parallel_state"] = parallel_state
    sys.modules["megatron.core"].parallel_state = parallel_state
    module("megatron.core.extensions.transformer_engine", get_thd_partitioned_indices=get_thd_partitioned_indices)
    module("megatron.core.rerun_state_machine", RerunDataIterator=RerunDataIterator)
    module("megatron.core.pipeline_parallel.hybrid_cp_schedule", BalancedCPScheduler=type("BalancedCPScheduler", (), {}))
    module("megatron.core.process_groups_config", ProcessGroupCollection=type("ProcessGroupCollection", (), {}))
    module("megatron.core.transformer.multi_token_prediction", mtp_on_this_rank=mtp_on_this_rank)

    loaded = []
    for rel in DATA_PATH_FILES:
        full = rel[:-3].replace("/", ".")
        spec = importlib.util.spec_from_file_location(full, Path(root) / rel)
        m = importlib.util.module_from_spec(spec)
        sys.modules[full] = m
        spec.loader.exec_module(m)
        parent, _, child = full.rpartition(".")
        setattr(sys.modules[parent], child, m)
        loaded.append(m)
    packed_seq_params, utils, data_schedule = loaded
    return data_schedule, utils, packed_seq_params


_SAVED = None


def unload_data_path() -> None:
    """Put back what sys.modules held before :func:`load_data_path`."""
    global _SAVED
    if _SAVED is None:
        return
    for name, m in _SAVED.items():
        if m is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = m
    _SAVED = None
