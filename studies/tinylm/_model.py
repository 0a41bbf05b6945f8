"""A character-level, decoder-only transformer (pre-LN GPT) small enough to train on a CPU."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from studies.tinylm._params import TinyLMParams


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which each position sees only itself and earlier positions."""

    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"heads ({heads}) must divide width ({width})")
        self.heads = heads
        self.dropout = dropout
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(b, t, c)))


class Block(nn.Module):
    """Pre-LN transformer block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, dropout)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width),
            nn.GELU(),
            nn.Linear(4 * width, width),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """Token + learned position embeddings, pre-LN blocks, final LayerNorm, linear head.

    ``forward`` maps token ids ``(B, T)`` to next-token logits ``(B, T, vocab_size)``. A
    sequence longer than ``context`` must be a multiple of it and is scored as independent
    chunks of ``context`` tokens, so models of different contexts are compared on the same targets.
    """

    def __init__(self, vocab_size: int, params: TinyLMParams) -> None:
        super().__init__()
        self.context = params.context
        self.activation_checkpointing = params.activation_checkpointing
        self.token_embedding = nn.Embedding(vocab_size, params.width)
        self.position_embedding = nn.Embedding(params.context, params.width)
        self.dropout = nn.Dropout(params.dropout)
        self.blocks = nn.ModuleList(Block(params.width, params.heads, params.dropout) for _ in range(params.layers))
        self.ln_f = nn.LayerNorm(params.width)
        self.head = nn.Linear(params.width, vocab_size, bias=False)
        self.apply(_init_weights)
        if params.tie_weights:
            self.head.weight = self.token_embedding.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, t = ids.shape
        if t > self.context:
            if t % self.context:
                raise ValueError(f"sequence length {t} is longer than context {self.context} but no multiple")
            return self.forward(ids.reshape(-1, self.context)).reshape(b, t, -1)
        positions = torch.arange(t, device=ids.device)
        x = self.dropout(self.token_embedding(ids) + self.position_embedding(positions))
        for block in self.blocks:
            x = self._run_block(block, x)
        return self.head(self.ln_f(x))

    def _run_block(self, block: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.activation_checkpointing and self.training and torch.is_grad_enabled():
            # Keeps only block inputs alive and recomputes the rest in backward: memory for compute.
            return checkpoint(block, x, use_reentrant=False)
        return block(x)


def _init_weights(module: nn.Module) -> None:
    # GPT-2's small normal init keeps the initial loss near log(vocab_size).
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
