"""dcpack.thd: a reference THD transformer that trains on what ``dcp_step`` returns (needs torch).

- :class:`ModelConfig`, :class:`THDTransformer`: a small decoder-only transformer
  (RMSNorm, RoPE from ``position_ids``, GQA attention, SwiGLU) whose size is a
  parameter, bf16 by default, fp32 for equality tests.
- Attention over the THD buffer, sequences separated by ``cu_seqlens_padded``,
  with context parallelism inside each microbatch's CP group (zigzag or
  contiguous): K/V all-gathered, dK/dV reduce-scattered (:mod:`dcpack.thd.attention`).
- :class:`THDBatch`, :class:`CPGroups`, :func:`train_step`, :func:`forward_backward`:
  microbatches in, masked token cross entropy over the global token count out,
  gradients summed over DPxCP.
- :class:`MicrobatchTimer`: each microbatch's forward and backward timed with CUDA
  events for online calibration (``train_step(..., timer=)``, then
  ``Planner.observe(plan, timer.collect(), comm=...)`` at the next step).

See docs/training.md.
"""

from .._require import require_torch

require_torch("dcpack.thd")

from .attention import LOCAL_REPLAY, AttentionLayout, GatherKV, LayoutError, layout, math_attention, varlen_attention, \
    varlen_available  # noqa: F401
from .model import ModelConfig, THDTransformer  # noqa: F401
from .online import MicrobatchTimer  # noqa: F401
from .train import CPGroups, THDBatch, allreduce_gradients, forward_backward, loss_denominator, loss_sum, \
    train_step  # noqa: F401
