"""Megatron-LM drop-in: dcpack's planners behind Megatron-LM's sequence-packing scheduler interface.

Megatron-LM (``megatron/core/datasets/data_schedule.py``) looks its
sequence-packing scheduler up by name in ``scheduler_map`` and calls it as::

    scheduler = scheduler_map[name](max_seqlen_per_dp_cp_rank, cp_size, dp_size,
                                    microbatch_group_size_per_vp_stage, max_num_seqs=..., **kwargs)
    scheduler.run(data_iterator, num_microbatches, dp_group, tp_group, pp_group, dp_cp_group, dev, config)

The classes here take the same constructor arguments and offer the same
methods as Megatron's ``BasePackingScheduler`` subclasses:

- :class:`DpBalancedScheduler`: Megatron's ``DpBalancedScheduler`` (static CP), same plans;
- :class:`DefaultDynamicCPScheduler`: Megatron's ``DefaultDynamicCPScheduler``, same plans;
- :class:`BalancedScheduler`: dcpack's ``balanced`` (dynamic CP, minimises the step cost model).

``get_groups_and_subsamples`` plans with the C library; ``run`` is
Megatron's own ``run`` (imported from Megatron at call time), which calls
back into ``get_groups_and_subsamples``.  :func:`install` puts the classes
into Megatron's ``scheduler_map`` at run time, under the names you choose,
without editing Megatron's files.  Importing this module does not import
Megatron or torch.

Its rooms: ``_megatron_schedulers`` (the schedulers, Level 1) and ``_megatron_data`` (the data path,
Level 2); every name of both is a name of this module.
"""

from __future__ import annotations

__all__ = [
    "DcpackPackingScheduler",
    "DpBalancedScheduler",
    "DefaultDynamicCPScheduler",
    "BalancedScheduler",
    "SCHEDULERS",
    "install",
    "uninstall",
    "make_scheduler",
    "DataPath",
    "config_from_megatron",
    "install_data_path",
    "uninstall_data_path",
]

from ._megatron_schedulers import (  # noqa: F401  (the module's names, as before its split)
    BalancedScheduler,
    DcpackPackingScheduler,
    DefaultDynamicCPScheduler,
    DpBalancedScheduler,
    REQUIRED_SAMPLE_KEYS,
    SCHEDULERS,
    _DEFAULT_MAPPING,
    _MISSING,
    _data_schedule_module,
    _int_arg,
    _megatron_pipeline,
    install,
    make_scheduler,
    uninstall,
)
from ._megatron_data import (  # noqa: F401  (the module's names, as before its split)
    DataPath,
    _Ahead,
    _COMM_FAILURES,
    _ENDED,
    _FAILED,
    _FIELDS,
    _HAS_BATCH,
    _HostMicrobatch,
    _MicrobatchTiming,
    _NO_BATCH,
    _ReadAhead,
    _SHAPE,
    _column,
    _first_values,
    _lengths_of_items,
    _observing,
    _read_items,
    _samples_from_megatron,
    _seq_idx_all,
    _sets_total_tokens,
    config_from_megatron,
    install_data_path,
    uninstall_data_path,
)

# the public classes and functions say they are dcpack.megatron's, where they are used from
for _obj in (globals()[_name] for _name in __all__):
    if isinstance(_obj, type) or callable(_obj):
        _obj.__module__ = __name__
del _obj
