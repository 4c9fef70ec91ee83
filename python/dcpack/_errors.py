"""dcpack's exceptions: one base class and one subclass per ``dcp_status``.

Every failing call raises the subclass of its status.  The exception carries
``.status`` (the C name, e.g. ``"DCP_ERR_CAPACITY"``) and ``.message`` (the
context's last-error message, with the offending value in it).  Bad
arguments caught in Python before reaching the library raise the same
classes (``InvalidArgumentError``, ``CapacityError``, ``BadLengthError``, ...).
"""

from __future__ import annotations

__all__ = [
    "Error",
    "NullPointerError",
    "InvalidArgumentError",
    "InvalidConfigError",
    "DcpOverflowError",
    "WorkspaceTooSmallError",
    "CapacityError",
    "BadLengthError",
    "InfeasibleError",
    "InvalidPlanError",
    "CorruptInputError",
    "FieldMismatchError",
    "CommError",
    "DcpTimeoutError",
    "AllocError",
    "CudaError",
    "NcclError",
    "UnsupportedError",
    "OutOfStepError",
    "StaleViewError",
    "error_class",
]


class Error(Exception):
    """Base class of every dcpack error.

    Attributes:
        status: the ``dcp_status`` name, e.g. ``"DCP_ERR_CAPACITY"``.
        code: the ``dcp_status`` value (negative).
        message: the message (for library errors, the context's last error).
    """

    status: str = "DCP_ERR"
    code: int = 0

    def __init__(self, message: str = "", status: str | None = None) -> None:
        if status is not None and status != type(self).status:
            # only reached for a status the package does not know yet
            self.status = status
        self.message = message
        super().__init__(message)

    def __str__(self) -> str:
        return f"{self.status}: {self.message}" if self.message else self.status

    def __reduce__(self):  # picklable across processes
        return (type(self), (self.message, self.status))


def _make(name: str, status: str, code: int, doc: str, *extra_bases: type) -> type[Error]:
    cls = type(name, (Error,) + extra_bases, {"status": status, "code": code, "__doc__": doc, "__module__": "dcpack"})
    return cls  # type: ignore[return-value]


NullPointerError = _make("NullPointerError", "DCP_ERR_NULL_POINTER", -1, "A required argument was missing (DCP_ERR_NULL_POINTER).")
InvalidArgumentError = _make(
    "InvalidArgumentError", "DCP_ERR_INVALID_ARGUMENT", -2,
    "An argument is out of its documented range, or has the wrong type, dtype or layout (DCP_ERR_INVALID_ARGUMENT).",
    ValueError, TypeError,
)
InvalidConfigError = _make("InvalidConfigError", "DCP_ERR_INVALID_CONFIG", -3, "dcp_config_validate() rejected the configuration (DCP_ERR_INVALID_CONFIG).", ValueError, TypeError)
DcpOverflowError = _make("DcpOverflowError", "DCP_ERR_OVERFLOW", -4, "A size computed from the configuration overflows (DCP_ERR_OVERFLOW).")
WorkspaceTooSmallError = _make("WorkspaceTooSmallError", "DCP_ERR_WORKSPACE_TOO_SMALL", -5, "Caller memory smaller than the workspace needs (DCP_ERR_WORKSPACE_TOO_SMALL).")
CapacityError = _make("CapacityError", "DCP_ERR_CAPACITY", -6, "Input exceeds a capacity fixed when the context was built (DCP_ERR_CAPACITY).")
BadLengthError = _make("BadLengthError", "DCP_ERR_BAD_LENGTH", -7, "A sequence length is zero, negative or too large (DCP_ERR_BAD_LENGTH).", ValueError)
InfeasibleError = _make("InfeasibleError", "DCP_ERR_INFEASIBLE", -8, "No plan satisfies the invariants (DCP_ERR_INFEASIBLE).")
InvalidPlanError = _make("InvalidPlanError", "DCP_ERR_INVALID_PLAN", -9, "A plan breaks an invariant (DCP_ERR_INVALID_PLAN).")
CorruptInputError = _make("CorruptInputError", "DCP_ERR_CORRUPT_INPUT", -10, "A caller buffer is inconsistent (DCP_ERR_CORRUPT_INPUT).")
FieldMismatchError = _make("FieldMismatchError", "DCP_ERR_FIELD_MISMATCH", -11, "Ranks disagree on the set of fields (DCP_ERR_FIELD_MISMATCH).")
CommError = _make("CommError", "DCP_ERR_COMM", -12, "The communicator failed (DCP_ERR_COMM).")
DcpTimeoutError = _make("DcpTimeoutError", "DCP_ERR_TIMEOUT", -13, "A peer did not arrive in time (DCP_ERR_TIMEOUT).", TimeoutError)
AllocError = _make("AllocError", "DCP_ERR_ALLOC", -15, "The library could not obtain its memory (DCP_ERR_ALLOC).", MemoryError)
CudaError = _make("CudaError", "DCP_ERR_CUDA", -16, "A CUDA runtime call failed (DCP_ERR_CUDA).")
NcclError = _make("NcclError", "DCP_ERR_NCCL", -17, "An NCCL call failed (DCP_ERR_NCCL).")
UnsupportedError = _make("UnsupportedError", "DCP_ERR_UNSUPPORTED", -18, "The library was built without the feature, e.g. CUDA (DCP_ERR_UNSUPPORTED).")
OutOfStepError = _make(
    "OutOfStepError", "DCP_ERR_OUT_OF_STEP", -19,
    "Ranks met in different calls: one skipped or repeated a step, or their step ids differ (DCP_ERR_OUT_OF_STEP). "
    "Raised on every rank of the step; the stepper then refuses every step until resync() is called on every "
    "rank with the same next call count.",
)

class StaleViewError(InvalidArgumentError):
    """A Plan or step output was used after the next plan or step on its context.

    Views point into the context's workspace, which the next call reuses; copy
    what you need to keep (``Plan.copy()``, ``StepOutput.copy()``).
    """


_BY_CODE: dict[int, type[Error]] = {
    cls.code: cls
    for cls in (
        NullPointerError, InvalidArgumentError, InvalidConfigError, DcpOverflowError, WorkspaceTooSmallError,
        CapacityError, BadLengthError, InfeasibleError, InvalidPlanError, CorruptInputError, FieldMismatchError,
        CommError, DcpTimeoutError, AllocError, CudaError, NcclError, UnsupportedError, OutOfStepError,
    )
}
_BY_NAME: dict[str, type[Error]] = {cls.status: cls for cls in _BY_CODE.values()}


def error_class(status) -> type[Error]:
    """The exception class of a status, given as its name (``"DCP_ERR_CAPACITY"``) or its value (-6)."""
    if isinstance(status, str):
        return _BY_NAME.get(status, Error)
    return _BY_CODE.get(int(status), Error)
