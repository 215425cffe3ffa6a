"""FlashAttention-3-compatible entry points (the signatures of sgl_kernel.flash_attn).

Code written against ``sgl_kernel.flash_attn.flash_attn_with_kvcache`` /
``flash_attn_varlen_func`` runs unchanged. Documented differences: a query row with no visible
key gets LSE -inf (FlashAttention: +inf); an fp8 ``q`` is upcast to bf16 (never required: keep q
in bf16/fp16); k_descale/v_descale are ignored for non-fp8 caches, as FA3 does.
"""

from __future__ import annotations

from . import _C
from ._framework import framework_of


def _unsupported(**args):
    """Raises NotImplementedError naming every argument that flashback does not support yet."""
    names = [name for name, given in args.items() if given]
    if names:
        raise NotImplementedError(
            f"flashback does not support {', '.join(names)} yet (remove the argument, or use a "
            "kernel that supports it)"
        )


def _cache_dtype(fw, cache, kv_dtype):
    """(cache as the C++ side reads it, dtype name or None): fp8 arrays cross as uint8."""
    if fw.is_fp8(cache):
        as_uint8, name = fw.fp8_as_uint8(cache)
        if kv_dtype not in (None, "auto", name):
            raise ValueError(f"kv_dtype: {kv_dtype!r} given for a {fw.dtype_name(cache)} cache")
        return as_uint8, name
    return cache, kv_dtype


def _upcast_fp8_q(fw, q, q_descale, heads_kv, row_batch):
    """fp8 q -> bf16 (f32 for NumPy, which has no bf16). FA3 takes fp8 q with q_descale [B, Hk];
    flashback never needs it: bf16 holds every e4m3/e5m2 value exactly, so keep q in bf16.
    row_batch: batch entry of each row for varlen q ([total_q, H, D]); None for [B, Sq, H, D]."""
    if not fw.is_fp8(q):
        return q  # FA3 reads q_descale only for fp8 q
    q = fw.astype(q, fw.upcast_dtype)
    if q_descale is None:
        return q
    # Row r, head h is scaled by q_descale[b(r), h // (H / Hk)].
    d = fw.repeat(fw.astype(q_descale, "float32"), q.shape[-2] // heads_kv, axis=1)
    d = d[:, None, :, None] if row_batch is None else d[row_batch][:, :, None]
    return fw.astype(fw.astype(q, "float32") * d, fw.upcast_dtype)


def _per_batch_descale(fw, d, batch, heads_kv):
    """k/v descale as f32 [B, Hk]; a scalar or [1]-shaped scale broadcasts (stride 0, no copy)."""
    if d is None:
        return None
    d = fw.astype(d, "float32")
    if d.ndim == 0 or (d.ndim == 1 and d.shape[0] == 1):
        d = fw.broadcast_to(fw.reshape(d, (1, 1)), (batch, heads_kv))
    return fw.small_readonly(d)


def _new_slots(fw, page_table, cache_seqlens, cu_new, total_new, page_size, like):
    """Cache slot of every appended token: token t of entry b goes to key position
    cache_seqlens[b] + (t - cu_new[b]), read through the page table. Computed with array ops so
    that device-resident metadata never syncs with the host."""
    t = fw.arange(0, total_new, 1, "int64", like)
    b = fw.searchsorted(cu_new[1:], t)
    pos = fw.astype(cache_seqlens[b], "int64") + (t - fw.astype(cu_new[b], "int64"))
    page = fw.astype(page_table[b, pos // page_size], "int64")
    return page * page_size + pos % page_size


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    qv=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    page_table=None,
    cu_seqlens_q=None,
    cu_seqlens_k_new=None,
    max_seqlen_q=None,
    rotary_seqlens=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    scheduler_metadata=None,
    num_splits=0,
    pack_gqa=None,
    sm_margin=0,
    return_softmax_lse=False,
    *,
    attention_chunk=0,
    kv_dtype=None,
    stream=None,
    reference=False,
    deterministic=False,
):
    """Attention of q over a (paged) KV cache, after appending k/v at cache_seqlens.

    Shapes (as FlashAttention-3):
      q: [B, Sq, H, D], or [total_q, H, D] with cu_seqlens_q [B + 1] (int32).
      k_cache/v_cache: [num_pages, P, Hk, D] with page_table [B, pages] (int32), or
        [B_cache, S, Hk, D] without one (cache_batch_idx picks the rows).
      k/v (optional): [B, S_new, Hk, D], or [total_new, Hk, D] with cu_seqlens_k_new; written into
        the caches in place at positions cache_seqlens[b] .. before attending (cache_seqlens
        itself is not modified, as in FA3).
      qv (optional, MLA absorbed): like q with the head dim of v_cache.
    Returns out like q with v's head dim, and with return_softmax_lse the f32 LSE: [B, H, Sq] in
    batch form, [H, total_q] in varlen form.

    flashback extras (keyword-only): kv_dtype names the format of uint8 caches ("fp8_e4m3" /
    "fp8_e5m2"); stream is a CUDA stream handle (default: the framework's current stream);
    reference=True runs the fp64 CPU oracle; deterministic=True asks for batch-invariant results.
    """
    _unsupported(
        rotary_cos=rotary_cos is not None,
        rotary_sin=rotary_sin is not None,
        rotary_seqlens=rotary_seqlens is not None,
        cache_leftpad=cache_leftpad is not None,
        scheduler_metadata=scheduler_metadata is not None,
        attention_chunk=bool(attention_chunk),
    )
    del rotary_interleaved, pack_gqa, sm_margin  # no effect without rotary / tuning knobs only
    if (k is None) != (v is None):
        raise ValueError("k, v: give both new keys and new values, or neither")
    fw = framework_of(q)

    varlen = cu_seqlens_q is not None
    if varlen:
        if q.ndim != 3:
            raise ValueError(f"q: expected [total_q, H, D] with cu_seqlens_q, got shape {tuple(q.shape)}")
        batch = cu_seqlens_q.shape[0] - 1
        cu_seqlens_q = fw.astype(cu_seqlens_q, "int32")
        seqlen_q = None
    else:
        if q.ndim != 4:
            raise ValueError(f"q: expected [B, Sq, H, D] without cu_seqlens_q, got shape {tuple(q.shape)}")
        batch, seqlen_q = q.shape[0], q.shape[1]
    if k_cache.ndim != 4 or v_cache.ndim != 4:
        raise ValueError(
            "k_cache, v_cache: expected [num_pages, P, Hk, D] (with page_table) or "
            f"[B, S, Hk, D], got shapes {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    heads_kv = k_cache.shape[2]

    k_cache, cache_name = _cache_dtype(fw, k_cache, kv_dtype)
    v_cache, _ = _cache_dtype(fw, v_cache, cache_name)
    fp8_cache = cache_name not in (None, "auto")

    # Without a page table the cache is [B_cache, S, Hk, D]: one page of S slots per row, and an
    # identity (or cache_batch_idx) page table of width 1.
    if page_table is None:
        if cache_batch_idx is not None:
            page_table = fw.reshape(fw.astype(cache_batch_idx, "int32"), (batch, 1))
        else:
            page_table = fw.reshape(fw.arange(0, batch, 1, "int32", q), (batch, 1))
    elif cache_batch_idx is not None:
        raise ValueError("cache_batch_idx: not allowed with a page_table (as in FlashAttention-3)")
    page_size = k_cache.shape[1]

    if cache_seqlens is None:
        cache_seqlens = fw.full((batch,), page_table.shape[1] * page_size, "int32", q)
    elif isinstance(cache_seqlens, int):
        cache_seqlens = fw.full((batch,), cache_seqlens, "int32", q)
    else:
        cache_seqlens = fw.astype(cache_seqlens, "int32")

    # Batch-entry index of each q row (only needed to scale an fp8 q per entry).
    row_batch = None
    if varlen and fw.is_fp8(q) and q_descale is not None:
        row_batch = fw.searchsorted(cu_seqlens_q[1:], fw.arange(0, q.shape[0], 1, "int64", q))
    q = _upcast_fp8_q(fw, q, q_descale, heads_kv, row_batch)
    if qv is not None:
        qv = _upcast_fp8_q(fw, qv, q_descale, heads_kv, row_batch)

    q = fw.last_contiguous(q)
    if qv is not None:
        qv = fw.last_contiguous(qv)
    if not varlen:
        q = fw.reshape(q, (batch * seqlen_q, q.shape[2], q.shape[3]))
        if qv is not None:
            qv = fw.reshape(qv, (batch * seqlen_q, qv.shape[2], qv.shape[3]))
        cu_seqlens_q = fw.arange(0, (batch + 1) * seqlen_q, max(seqlen_q, 1), "int32", q)
        if seqlen_q == 0:
            cu_seqlens_q = fw.full((batch + 1,), 0, "int32", q)
        max_seqlen_q = seqlen_q
    total_q, heads, _ = q.shape

    if stream is None:
        stream = fw.current_stream(q)
    common = dict(stream=stream, reference=reference)

    # Append the new keys/values, then attend over cache_seqlens + new lengths.
    if k is not None:
        if fp8_cache:
            raise NotImplementedError(
                "k, v: appending into an fp8 cache through flash_attn_with_kvcache is not "
                "supported yet (use flashback.kv_store with k_scale/v_scale)"
            )
        k, v = fw.last_contiguous(k), fw.last_contiguous(v)
        if cu_seqlens_k_new is None:
            if k.ndim != 4:
                raise ValueError(f"k: expected [B, S_new, Hk, D], got shape {tuple(k.shape)}")
            s_new = k.shape[1]
            k = fw.reshape(k, (batch * s_new, k.shape[2], k.shape[3]))
            v = fw.reshape(v, (batch * s_new, v.shape[2], v.shape[3]))
            cu_new = fw.arange(0, (batch + 1) * s_new, max(s_new, 1), "int32", q)
            if s_new == 0:
                cu_new = fw.full((batch + 1,), 0, "int32", q)
        else:
            cu_new = fw.astype(cu_seqlens_k_new, "int32")
        loc = _new_slots(fw, page_table, cache_seqlens, cu_new, k.shape[0], page_size, q)
        _C.kv_store(k, v, loc, k_cache, v_cache, **common)
        cache_seqlens = cache_seqlens + (cu_new[1:] - cu_new[:-1])
        cache_seqlens = fw.astype(cache_seqlens, "int32")
    # Without k, cu_seqlens_k_new has no effect (the seed passes it anyway).

    k_descale = _per_batch_descale(fw, k_descale, batch, heads_kv) if fp8_cache else None
    v_descale = _per_batch_descale(fw, v_descale, batch, heads_kv) if fp8_cache else None

    out = fw.empty((total_q, heads, v_cache.shape[-1]), fw.dtype_name(q), q)
    lse = lse_arg = None
    if return_softmax_lse:
        if varlen:
            lse = fw.empty((heads, total_q), "float32", q)
            lse_arg = fw.transpose(lse, 0, 1)  # the C++ API takes [total_q, H], any strides
        else:
            lse_arg = fw.empty((total_q, heads), "float32", q)

    _C.paged_attention(
        q,
        k_cache,
        v_cache,
        page_table,
        cache_seqlens,
        cu_seqlens_q,
        out,
        qv=qv,
        lse=lse_arg,
        k_descale=k_descale,
        v_descale=v_descale,
        workspace_alloc=lambda nbytes: fw.empty((nbytes,), "uint8", q),
        kv_dtype=cache_name,
        softmax_scale=float(softmax_scale or 0.0),
        causal=bool(causal),
        window_left=int(window_size[0]),
        window_right=int(window_size[1]),
        softcap=float(softcap or 0.0),
        max_seqlen_q=int(max_seqlen_q or 0),
        num_splits=int(num_splits or 0),
        deterministic=deterministic,
        **common,
    )

    if not varlen:
        out = fw.reshape(out, (batch, seqlen_q, heads, out.shape[-1]))
        if return_softmax_lse:  # [B*Sq, H] -> [B, H, Sq], as FA3 returns it
            lse = fw.contiguous(fw.transpose(fw.reshape(lse_arg, (batch, seqlen_q, heads)), 1, 2))
    return (out, lse) if return_softmax_lse else out


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    seqused_q=None,
    seqused_k=None,
    softmax_scale=None,
    causal=False,
    qv=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    window_size=(-1, -1),
    softcap=0.0,
    num_splits=1,
    pack_gqa=None,
    sm_margin=0,
    return_softmax_lse=False,
    *,
    stream=None,
    reference=False,
    deterministic=False,
):
    """Attention over contiguous varlen K/V (q [total_q, H, D], k [total_k, Hk, D],
    v [total_k, Hk, Dv]; the head dim of v may differ from q's). Returns out [total_q, H, Dv] and,
    with return_softmax_lse, the f32 LSE [H, total_q]."""
    fw = framework_of(q)
    _unsupported(
        seqused_q=seqused_q is not None,
        seqused_k=seqused_k is not None,
        qv=qv is not None,
        **{"fp8 q/k/v (q_descale, k_descale, v_descale)": fw.is_fp8(q) or fw.is_fp8(k)},
    )
    del q_descale, k_descale, v_descale, num_splits, pack_gqa, sm_margin  # fp8 only / tuning
    q, k, v = fw.last_contiguous(q), fw.last_contiguous(k), fw.last_contiguous(v)
    total_q, heads, _ = q.shape
    out = fw.empty((total_q, heads, v.shape[-1]), fw.dtype_name(q), q)
    lse = lse_arg = None
    if return_softmax_lse:
        lse = fw.empty((heads, total_q), "float32", q)
        lse_arg = fw.transpose(lse, 0, 1)
    _C.ragged_attention(
        q,
        k,
        v,
        fw.astype(cu_seqlens_q, "int32"),
        fw.astype(cu_seqlens_k, "int32"),
        out,
        lse=lse_arg,
        softmax_scale=float(softmax_scale or 0.0),
        causal=bool(causal),
        window_left=int(window_size[0]),
        window_right=int(window_size[1]),
        softcap=float(softcap or 0.0),
        max_seqlen_q=int(max_seqlen_q or 0),
        max_seqlen_k=int(max_seqlen_k or 0),
        stream=fw.current_stream(q) if stream is None else stream,
        reference=reference,
        deterministic=deterministic,
    )
    return (out, lse) if return_softmax_lse else out
