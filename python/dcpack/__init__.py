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
    OutOfStepError,
    StaleViewError,
    UnsupportedError,
    WorkspaceTooSmallError,
    error_class,
)


def _preload_nccl() -> None:
    """Load the libnccl torch uses, before the extension asks for libnccl.so.2 (CUDA builds only).

    The extension needs libnccl.so.2 by soname; the dynamic loader reuses an
    already-loaded library of that soname.  Loading torch's own copy first
    (the nvidia-nccl wheel's file, which torch later loads by the same path,
    or DCPACK_NCCL_LIBRARY) keeps one libnccl in the process whichever of
    dcpack and torch is imported first.
    """
    import ctypes
    import importlib.util
    import os
    import sys

    path = os.environ.get("DCPACK_NCCL_LIBRARY")
    if not path and "torch" not in sys.modules:
        import glob

        try:
            spec = importlib.util.find_spec("nvidia")
        except (ImportError, ValueError):
            spec = None
        for base in (spec.submodule_search_locations or []) if spec else []:
            # nvidia/nccl/lib (the nvidia-nccl wheels), else any other nvidia/*/lib that holds it
            candidates = [os.path.join(base, "nccl", "lib", "libnccl.so.2")]
            candidates += sorted(glob.glob(os.path.join(base, "*", "lib", "libnccl.so.2")))
            path = next((c for c in candidates if os.path.exists(c)), None)
            if path:
                break
    if path:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


try:
    from ._build_config import LINKS_NCCL as _LINKS_NCCL
except ImportError:  # pragma: no cover - a tree without the generated file
    _LINKS_NCCL = False
if _LINKS_NCCL:
    _preload_nccl()

from . import _core  # noqa: E402
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
    "NcclError", "UnsupportedError", "OutOfStepError", "StaleViewError", "error_class",
    "FIELD_TOKENS", "FIELD_LABELS", "FIELD_LOSS_MASK", "FIELD_POSITION_IDS", "FIELD_ALL",
    "Config", "CostModel", "Planner", "Plan", "PlanStats", "Violation", "as_lengths", "cost",
    "status_name", "cuda_device_count", "HAVE_CUDA", "HAVE_NCCL", "__version__",
]

from ._inproc import (  # noqa: E402,F401
    FAULT_NEVER_ARRIVE,
    FAULT_NONE,
    FAULT_RETURN_ERROR,
    FAULT_TRUNCATE,
    Comm,
    InprocCluster,
    InprocWorld,
    StepArgs,
)
from ._samples import PackedSamples, Sample  # noqa: E402,F401
from ._step import Stepper  # noqa: E402,F401
from ._step_output import Microbatch, StepOutput  # noqa: E402,F401

__all__ += [
    "FAULT_NONE", "FAULT_RETURN_ERROR", "FAULT_NEVER_ARRIVE", "FAULT_TRUNCATE", "Comm", "InprocWorld",
    "InprocCluster", "StepArgs", "Sample", "PackedSamples", "Microbatch", "StepOutput", "Stepper",
]
