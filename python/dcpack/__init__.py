"""dcpack: plan and move the variable-length training data of LLMs across GPUs.

The Python binding of the dcpack C library (``include/dcpack.h``):

- :class:`Config`, :class:`Planner`, :class:`Plan`: plan a global batch with
  ``dp_balanced``, ``dynamic_cp`` (Megatron-LM's schedulers, bit for bit) or
  dcpack's ``balanced``; plans are zero-copy numpy views of the planner's
  workspace.
- :class:`InprocWorld`, :class:`InprocCluster`, :class:`Stepper`: run a whole
  multi-rank ``dcp_step`` (gather, plan, exchange, THD packing, CP slicing,
  TP broadcast) from Python threads on the CPU.
- :mod:`dcpack.torch` (needs torch): ``dcp_step`` on CUDA tensors over NCCL.
- :mod:`dcpack.megatron`: drop-in schedulers for Megatron-LM.

Every failure raises a subclass of :class:`dcpack.Error` named after its
``dcp_status``.  See docs/python.md.
"""

from ._errors import (  # noqa: F401  (re-exported)
    AllocError,
    BadLengthError,
    CapacityError,
    CommError,
    CorruptInputError,
    CudaError,
    DcpOverflowError,
    DcpTimeoutError,
    Error,
    FieldMismatchError,
    InfeasibleError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidPlanError,
    NcclError,
    NullPointerError,
    StaleViewError,
    UnsupportedError,
    WorkspaceTooSmallError,
    error_class,
)
from . import _core
from ._api import (  # noqa: F401
    FIELD_ALL,
    FIELD_LABELS,
    FIELD_LOSS_MASK,
    FIELD_POSITION_IDS,
    FIELD_TOKENS,
    Config,
    CostModel,
    Plan,
    Planner,
    PlanStats,
    Violation,
    as_lengths,
    cost,
)

__version__ = f"{_core.VERSION_MAJOR}.{_core.VERSION_MINOR}.{_core.VERSION_PATCH}"

HAVE_CUDA: bool = bool(_core.HAVE_CUDA)
"""True when the extension's library was built with the CUDA kernels."""
HAVE_NCCL: bool = bool(_core.HAVE_NCCL)
"""True when the extension's library was built with the NCCL backend."""


def status_name(code: int) -> str:
    """``dcp_status_str()``: the name of a status value, e.g. ``status_name(-6) == "DCP_ERR_CAPACITY"``."""
    return _core.status_str(int(code))


def cuda_device_count() -> int:
    """``dcp_cuda_device_count()``: visible CUDA devices (0 in a CPU-only build)."""
    return _core.cuda_device_count()


__all__ = [
    "Error", "NullPointerError", "InvalidArgumentError", "InvalidConfigError", "DcpOverflowError",
    "WorkspaceTooSmallError", "CapacityError", "BadLengthError", "InfeasibleError", "InvalidPlanError",
    "CorruptInputError", "FieldMismatchError", "CommError", "DcpTimeoutError", "AllocError", "CudaError",
    "NcclError", "UnsupportedError", "StaleViewError", "error_class",
    "FIELD_TOKENS", "FIELD_LABELS", "FIELD_LOSS_MASK", "FIELD_POSITION_IDS", "FIELD_ALL",
    "Config", "CostModel", "Planner", "Plan", "PlanStats", "Violation", "as_lengths", "cost",
    "status_name", "cuda_device_count", "HAVE_CUDA", "HAVE_NCCL", "__version__",
]

from ._step import (  # noqa: E402,F401
    FAULT_NEVER_ARRIVE,
    FAULT_NONE,
    FAULT_RETURN_ERROR,
    FAULT_TRUNCATE,
    Comm,
    InprocCluster,
    InprocWorld,
    Microbatch,
    Sample,
    StepArgs,
    StepOutput,
    Stepper,
)

__all__ += [
    "FAULT_NONE", "FAULT_RETURN_ERROR", "FAULT_NEVER_ARRIVE", "FAULT_TRUNCATE", "Comm", "InprocWorld",
    "InprocCluster", "StepArgs", "Sample", "Microbatch", "StepOutput", "Stepper",
]
