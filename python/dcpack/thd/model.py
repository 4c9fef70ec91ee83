"""A small decoder-only transformer over THD microbatches (RMSNorm, RoPE, GQA attention, SwiGLU).

:class:`ModelConfig` fixes the size (layers, hidden, heads, KV heads, FFN width,
vocabulary), the parameter dtype (bf16 by default, fp32 for the equality tests)
and the attention kernel ("varlen" on CUDA, "math" anywhere).  The model is fed
a :class:`~dcpack.thd.batch.THDBatch` (what ``dcp_step`` gives one rank for one
microbatch) and returns logits for its slots; :meth:`THDTransformer.forward_dense`
runs one unpacked sequence with plain causal attention (the reference of the
equality tests).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .attention import AttentionLayout, attention


@dataclass(frozen=True)
class ModelConfig:
    """Size and numerics of :class:`THDTransformer`.

    ``attention``: "varlen" (torch's FlashAttention varlen kernel, CUDA, bf16 or
    fp16), "math" (exact, any device and dtype) or "auto" (varlen where it can
    run, else math).
    """

    vocab_size: int = 32000
    hidden: int = 4096
    layers: int = 1
    heads: int = 32
    kv_heads: int = 8
    ffn: int = 14336
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    dtype: torch.dtype = torch.bfloat16
    attention: str = "auto"
    init_std: float = 0.02
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden", "layers", "heads", "kv_heads", "ffn"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        if (self.hidden // self.heads) % 2:
            raise ValueError(f"head dimension {self.hidden // self.heads} must be even (RoPE)")
        if self.attention not in ("auto", "varlen", "math"):
            raise ValueError(f"attention must be 'auto', 'varlen' or 'math', got {self.attention!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def kernel_for(self, device: torch.device) -> str:
        """The attention kernel this configuration runs on ``device``."""
        if self.attention != "auto":
            return self.attention
        from .attention import varlen_available
        if device.type == "cuda" and self.dtype in (torch.bfloat16, torch.float16) and varlen_available():
            return "varlen"
        return "math"

    def replace(self, **changes) -> "ModelConfig":
        return replace(self, **changes)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def rope(x: torch.Tensor, position_ids: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding (rotate-half) of ``x [T, H, D]`` at ``position_ids [T]``, computed in fp32."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = position_ids.to(torch.float32)[:, None] * inv[None, :]          # [T, D/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    xf = x.float()
    x1, x2 = xf[..., :d // 2], xf[..., d // 2:]
    rot = torch.cat([-x2, x1], -1)
    return (xf * cos + rot * sin).to(x.dtype)


class Block(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.c = c
        hd = c.head_dim
        self.attn_norm = RMSNorm(c.hidden, c.norm_eps)
        self.wq = nn.Linear(c.hidden, c.heads * hd, bias=False)
        self.wkv = nn.Linear(c.hidden, 2 * c.kv_heads * hd, bias=False)
        self.wo = nn.Linear(c.heads * hd, c.hidden, bias=False)
        self.mlp_norm = RMSNorm(c.hidden, c.norm_eps)
        self.w_gate_up = nn.Linear(c.hidden, 2 * c.ffn, bias=False)
        self.w_down = nn.Linear(c.ffn, c.hidden, bias=False)

    def _qkv(self, x: torch.Tensor, position_ids: torch.Tensor):
        c, t = self.c, x.shape[0]
        h = self.attn_norm(x)
        q = self.wq(h).view(t, c.heads, c.head_dim)
        k, v = self.wkv(h).view(t, 2, c.kv_heads, c.head_dim).unbind(1)
        return rope(q, position_ids, c.rope_theta), rope(k, position_ids, c.rope_theta), v

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w_gate_up(self.mlp_norm(x)).chunk(2, -1)
        return x + self.w_down(F.silu(gate) * up)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, lay: AttentionLayout, kernel: str) -> torch.Tensor:
        q, k, v = self._qkv(x, position_ids)
        o = attention(q, k, v, lay, kernel)
        x = x + self.wo(o.reshape(x.shape[0], -1))
        return self._mlp(x)

    def forward_dense(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x, position_ids)
        g = self.c.heads // self.c.kv_heads
        o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1).repeat_interleave(g, 0)[None],
                                           v.transpose(0, 1).repeat_interleave(g, 0)[None], is_causal=True)
        x = x + self.wo(o[0].transpose(0, 1).reshape(x.shape[0], -1))
        return self._mlp(x)


class THDTransformer(nn.Module):
    """Decoder-only transformer: embedding, ``layers`` blocks, final RMSNorm, untied output head.

    Parameters are drawn from ``torch.manual_seed(config.seed)`` on the CPU in
    fp32 (normal, std ``init_std``; norms 1) and then cast and moved, so every
    rank that builds the model with the same configuration holds the same
    weights, whatever its device.
    """

    def __init__(self, config: ModelConfig, device: Optional[torch.device] = None) -> None:
        super().__init__()
        self.config = config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.embed = nn.Embedding(config.vocab_size, config.hidden)
            self.blocks = nn.ModuleList([Block(config) for _ in range(config.layers)])
            self.norm = RMSNorm(config.hidden, config.norm_eps)
            self.head = nn.Linear(config.hidden, config.vocab_size, bias=False)
            for name, p in self.named_parameters():
                if p.dim() > 1:
                    nn.init.normal_(p, std=config.init_std)
        self.to(device=device or torch.device("cpu"), dtype=config.dtype)

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def forward(self, batch) -> torch.Tensor:
        """Logits ``[num_tokens, vocab]`` for one :class:`~dcpack.thd.batch.THDBatch` on this rank."""
        kernel = self.config.kernel_for(self.device)
        x = self.embed(batch.tokens)
        for blk in self.blocks:
            x = blk(x, batch.position_ids, batch.layout, kernel)
        return self.head(self.norm(x))

    def forward_dense(self, tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Logits of one unpacked sequence, with plain causal attention (no THD, no CP)."""
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk.forward_dense(x, position_ids)
        return self.head(self.norm(x))
