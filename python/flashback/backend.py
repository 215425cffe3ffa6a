"""The AttentionBackend for engines written in Python (SGLang's FlashAttentionBackend, SPEC.md
§3-§7): metadata once per forward pass, then one call per attention layer that writes this
step's K/V into the cache and attends. Arrays may come from any supported framework."""

from __future__ import annotations

from dataclasses import dataclass

from . import _C
from ._C import ForwardMode, Layer  # noqa: F401  (re-exported)
from ._framework import framework_of


@dataclass
class ForwardBatch:
    """One forward pass (flashback::ForwardBatch). Index arrays are 1-D int32/int64; `*_cpu`
    are optional host copies of device arrays (the host plan reads them)."""

    forward_mode: ForwardMode
    batch_size: int
    req_to_token: object = None  # int32 [max_reqs, max_context_len]
    req_pool_indices: object = None
    seq_lens: object = None  # committed tokens incl. this step's
    out_cache_loc: object = None  # slots of this step's new K/V
    extend_seq_lens: object = None
    extend_prefix_lens: object = None
    encoder_lens: object = None
    encoder_out_cache_loc: object = None
    req_pool_indices_cpu: object = None
    seq_lens_cpu: object = None
    extend_seq_lens_cpu: object = None
    extend_prefix_lens_cpu: object = None
    encoder_lens_cpu: object = None
    draft_step: int = -1  # DECODE: step s of a multi-step draft
    num_draft_tokens: int = 0  # TARGET_VERIFY: N draft tokens per request


def _cache_args(fw, k_cache, v_cache, kv_dtype):
    """fp8 caches cross as uint8 plus their format's name."""
    if fw.is_fp8(k_cache):
        k_cache, kv_dtype = fw.fp8_as_uint8(k_cache)
        if v_cache is not None:
            v_cache, _ = fw.fp8_as_uint8(v_cache)
    return k_cache, v_cache, kv_dtype


class AttentionBackend:
    """flashback::AttentionBackend. `stream` (CUDA tensors) is fixed at construction; None takes
    PyTorch's current stream of the current device when PyTorch is imported and CUDA is there."""

    def __init__(self, *, page_size=1, attention_chunk_size=0, deterministic=False,
                 num_threads=0, stream=None, use_page_table=False, cuda_graph_fill_seq_len=1,
                 max_draft_tokens=0, _impl=None):
        self._be = _impl or _C.AttentionBackend(
            page_size=page_size, attention_chunk_size=attention_chunk_size,
            deterministic=deterministic, num_threads=num_threads, stream=_default_stream(stream),
            use_page_table=use_page_table, cuda_graph_fill_seq_len=cuda_graph_fill_seq_len,
            max_draft_tokens=max_draft_tokens)
        self._batch = None  # the backend keeps views of the batch's arrays: keep them alive

    def init_forward_metadata(self, batch: ForwardBatch):
        self._batch = batch
        self._be.init_forward_metadata(batch)

    def _run(self, method, q, k, v, layer, batch, k_cache, v_cache, save_kv, out, return_lse,
             kv_dtype):
        fw = framework_of(q)
        q = fw.last_contiguous(q)
        if out is None:
            out = fw.empty((q.shape[0], layer.num_q_heads, layer.v_head_dim), fw.dtype_name(q), q)
        lse = fw.empty((q.shape[0], layer.num_q_heads), "float32", q) if return_lse else None
        k_cache, v_cache, kv_dtype = _cache_args(fw, k_cache, v_cache, kv_dtype)
        method(q, k, v, out, layer, batch, k_cache, v_cache=v_cache, save_kv=save_kv, lse=lse,
               kv_dtype=kv_dtype)
        return (out, lse) if return_lse else out

    def forward(self, q, k, v, layer, batch, k_cache, v_cache=None, *, save_kv=True, out=None,
                return_lse=False, kv_dtype=None):
        """One attention layer: q [T, Hq, D] (MLA absorbed: [T, Hq, R + Dr], q_nope first), k/v
        this step's rows (MLA: k the latent rows, v None), caches [num_pages, P, Hk, D] (MLA:
        k_cache the latent buffer, v_cache None). Returns out [T, Hq, Dv] (and LSE [T, Hq])."""
        return self._run(self._be.forward, q, k, v, layer, batch, k_cache, v_cache, save_kv, out,
                         return_lse, kv_dtype)

    def forward_extend(self, q, k, v, layer, batch, k_cache, v_cache=None, *, save_kv=True,
                       out=None, return_lse=False, kv_dtype=None):
        return self._run(self._be.forward_extend, q, k, v, layer, batch, k_cache, v_cache,
                         save_kv, out, return_lse, kv_dtype)

    def forward_decode(self, q, k, v, layer, batch, k_cache, v_cache=None, *, save_kv=True,
                       out=None, return_lse=False, kv_dtype=None):
        return self._run(self._be.forward_decode, q, k, v, layer, batch, k_cache, v_cache,
                         save_kv, out, return_lse, kv_dtype)

    def forward_extend_mha(self, q, k, v, batch):
        """MLA chunked prefix: the new tokens attend to themselves causally. Returns (out, lse)."""
        fw = framework_of(q)
        out = fw.empty((q.shape[0], q.shape[1], v.shape[-1]), fw.dtype_name(q), q)
        lse = fw.empty((q.shape[0], q.shape[1]), "float32", q)
        self._be.forward_extend_mha(q, k, v, out, lse, batch)
        return out, lse

    def forward_prefix_chunk(self, q, k, v, batch, cu_seq_lens, max_seq_len):
        """MLA chunked prefix: the new tokens attend to one prefix chunk. Returns (out, lse)."""
        fw = framework_of(q)
        out = fw.empty((q.shape[0], q.shape[1], v.shape[-1]), fw.dtype_name(q), q)
        lse = fw.empty((q.shape[0], q.shape[1]), "float32", q)
        self._be.forward_prefix_chunk(q, k, v, out, lse, batch, cu_seq_lens, int(max_seq_len))
        return out, lse

    def init_cuda_graph_state(self, max_bs, max_context_len):
        self._be.init_cuda_graph_state(max_bs, max_context_len)

    def init_forward_metadata_capture_cuda_graph(self, batch: ForwardBatch):
        self._batch = batch
        self._be.init_forward_metadata_capture_cuda_graph(batch)

    def init_forward_metadata_replay_cuda_graph(self, batch: ForwardBatch):
        self._batch = batch
        self._be.init_forward_metadata_replay_cuda_graph(batch)


class MultiStepDraftBackend:
    """One AttentionBackend per draft step 0..num_steps-2 (the last step runs no attention)."""

    def __init__(self, num_steps, **config):
        stream = _default_stream(config.pop("stream", None))
        self._ms = _C.MultiStepDraftBackend(num_steps, stream=stream, **config)
        self._steps = [AttentionBackend(_impl=self._ms.step(s)) for s in range(num_steps - 1)]
        self._batch = None

    @property
    def num_steps(self):
        return self._ms.num_steps

    def step(self, s) -> AttentionBackend:
        return self._steps[s]

    def init_forward_metadata(self, batch: ForwardBatch):
        self._batch = batch
        self._ms.init_forward_metadata(batch)

    def init_cuda_graph_state(self, max_bs, max_context_len):
        self._ms.init_cuda_graph_state(max_bs, max_context_len)

    def init_forward_metadata_capture_cuda_graph(self, batch: ForwardBatch):
        self._batch = batch
        self._ms.init_forward_metadata_capture_cuda_graph(batch)

    def init_forward_metadata_replay_cuda_graph(self, batch: ForwardBatch):
        self._batch = batch
        self._ms.init_forward_metadata_replay_cuda_graph(batch)


def _default_stream(stream):
    if stream is not None:
        return int(stream)
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.current_stream().cuda_stream
    return 0
