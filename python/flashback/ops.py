"""merge_state and the KV store, for engines written in Python (SPEC.md §5, §6)."""

from __future__ import annotations

from . import _C
from ._framework import framework_of


def merge_state(v_a, s_a, v_b, s_b, v_merged=None, s_merged=None, *, stream=None, reference=False):
    """Merges two partial attention results (sgl_kernel.merge_state's signature).

    v_a, v_b: [T, H, D]; s_a, s_b: their f32 LSE [T, H] (+inf or -inf marks an empty part).
    Returns (v_merged, s_merged), allocated in v_a's framework unless given (they may alias
    v_a / s_a)."""
    fw = framework_of(v_a)
    if v_merged is None:
        v_merged = fw.empty(v_a.shape, fw.dtype_name(v_a), v_a)
    if s_merged is None:
        s_merged = fw.empty(s_a.shape, "float32", v_a)
    _C.merge_state(
        v_a,
        s_a,
        v_b,
        s_b,
        v_merged,
        lse=s_merged,
        stream=fw.current_stream(v_a) if stream is None else stream,
        reference=reference,
    )
    return v_merged, s_merged


def kv_store(
    k,
    v,
    loc,
    k_cache,
    v_cache,
    k_scale=1.0,
    v_scale=1.0,
    *,
    kv_dtype=None,
    stream=None,
    reference=False,
):
    """Writes rows k[t] (and v[t]) to cache slot loc[t], in place.

    k: [T, Hk, D], v: [T, Hk, Dv] or None (MLA: the latent rows go in k); loc: int32/int64 [T];
    caches [num_slots, Hk, D] or [num_pages, P, Hk, D]. An fp8 cache (torch.float8_*, or uint8
    with kv_dtype="fp8_e4m3"/"fp8_e5m2") stores k / k_scale rounded to fp8; k and v are not
    modified."""
    fw = framework_of(k)
    names = set()
    if fw.is_fp8(k_cache):
        k_cache, name = fw.fp8_as_uint8(k_cache)
        names.add(name)
    if v_cache is not None and fw.is_fp8(v_cache):
        v_cache, name = fw.fp8_as_uint8(v_cache)
        names.add(name)
    if len(names) > 1:
        raise ValueError(f"v_cache: expected the dtype of k_cache, got {sorted(names)}")
    if names:
        (name,) = names
        if kv_dtype not in (None, "auto", name):
            raise ValueError(f"kv_dtype: {kv_dtype!r} given for a {name} cache")
        kv_dtype = name
    _C.kv_store(
        fw.last_contiguous(k),
        None if v is None else fw.last_contiguous(v),
        loc,
        k_cache,
        v_cache,
        k_scale=float(k_scale),
        v_scale=float(v_scale),
        kv_dtype=kv_dtype,
        stream=fw.current_stream(k) if stream is None else stream,
        reference=reference,
    )
