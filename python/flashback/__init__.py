"""flashback: an attention backend for LLM serving engines.

Drop-in FlashAttention-3 functions (the signatures of ``sgl_kernel.flash_attn``), the state
merge and the KV store, over any DLPack array on the CPU or a CUDA device. Outputs come back in
the caller's framework; CUDA work runs on the caller's current stream.
"""

from ._C import Error  # noqa: F401  (flashback.Error: a ValueError naming the argument)
from .backend import (  # noqa: F401
    AttentionBackend,
    ForwardBatch,
    ForwardMode,
    Layer,
    MultiStepDraftBackend,
)
from .flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache  # noqa: F401
from .ops import kv_store, merge_state  # noqa: F401

__version__ = "0.1.0"

__all__ = [
    "AttentionBackend",
    "Error",
    "ForwardBatch",
    "ForwardMode",
    "Layer",
    "MultiStepDraftBackend",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "kv_store",
    "merge_state",
]
