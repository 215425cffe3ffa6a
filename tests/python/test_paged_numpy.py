"""flash_attn_with_kvcache on NumPy arrays (the CPU build), against the tests' float64 reference.

Random inputs, random page placement, NaN in every cache slot that must not be read, ragged
lengths including 0, 1 and page boundaries."""

import numpy as np
import pytest
from reference import PagedCase, as_f64, assert_close, assert_lse_close, attention_ref

import flashback


def run_case(case, reference, *, causal=True, window=(-1, -1), softcap=0.0, scale=None, mla=False,
             descale=False, varlen=True, lse=True, scalar_descale=False):
    a = case.build()
    rng = a["rng"]
    batch = len(case.q_lens)
    kwargs = dict(causal=causal, window_size=window, softcap=softcap, softmax_scale=scale,
                  return_softmax_lse=lse, reference=reference)
    qv = None
    if mla:
        qv = rng.standard_normal((a["q"].shape[0], case.heads, case.head_dim_v)).astype(case.dtype)
        kwargs["qv"] = qv
    kd = vd = None
    if descale:
        if scalar_descale:
            kd = np.full((batch, case.heads_kv), 0.7, np.float32)
            vd = np.full((batch, case.heads_kv), 1.3, np.float32)
            kwargs["k_descale"] = np.broadcast_to(np.float32(0.7), (batch, case.heads_kv))
            kwargs["v_descale"] = np.float32([1.3])
        else:
            kd = rng.uniform(0.5, 2.0, (batch, case.heads_kv)).astype(np.float32)
            vd = rng.uniform(0.5, 2.0, (batch, case.heads_kv)).astype(np.float32)
            kwargs["k_descale"], kwargs["v_descale"] = kd, vd
    if case.kv_fmt:
        kwargs["kv_dtype"] = case.kv_fmt
    if case.append:
        kwargs["k"], kwargs["v"] = a["k_new"], a["v_new"]
        kwargs["cu_seqlens_k_new"] = a["cu_new"]

    q = a["q"]
    if varlen:
        res = flashback.flash_attn_with_kvcache(
            q, a["k_cache"], a["v_cache"], cache_seqlens=a["cache_seqlens"],
            page_table=a["page_table"], cu_seqlens_q=a["cu_seqlens_q"],
            max_seqlen_q=max(case.q_lens + [0]), **kwargs)
    else:  # batch form: equal q lengths
        sq = case.q_lens[0]
        qb = q.reshape(batch, sq, case.heads, case.head_dim)
        if qv is not None:
            kwargs["qv"] = qv.reshape(batch, sq, case.heads, -1)
        res = flashback.flash_attn_with_kvcache(
            qb, a["k_cache"], a["v_cache"], cache_seqlens=a["cache_seqlens"],
            page_table=a["page_table"], **kwargs)
    out, lse_out = res if lse else (res, None)
    assert isinstance(out, np.ndarray)

    outs, lses = [], []
    cu = a["cu_seqlens_q"]
    for b in range(batch):
        n_keys = case.kv_lens[b] + (case.append[b] if case.append else 0)
        # FA3 semantics: descale applies to fp8 caches only.
        kd_ref, vd_ref = (kd, vd) if case.kv_fmt else (None, None)
        k, v = case.keys(b, a["k_cache"], a["v_cache"], n_keys, kd_ref, vd_ref)
        qb = as_f64(q[cu[b] : cu[b + 1]])
        qvb = None if qv is None else as_f64(qv[cu[b] : cu[b + 1]])
        o, l = attention_ref(qb, k, v, causal=causal, window=window, softcap=softcap, scale=scale, qv=qvb)
        outs.append(o)
        lses.append(l)
    ref_out = np.concatenate(outs)
    ref_lse = np.concatenate(lses)
    if not varlen:
        sq = case.q_lens[0]
        ref_out = ref_out.reshape(batch, sq, case.heads, -1)
        ref_lse = ref_lse.reshape(batch, sq, case.heads).transpose(0, 2, 1)
    else:
        ref_lse = ref_lse.T  # FA3 varlen layout: [H, total_q]
    assert_close(out, ref_out, case.dtype)
    if lse:
        assert_lse_close(lse_out, ref_lse)
    return a


RAGGED = [
    ([1, 1, 1, 1], [0, 1, 16, 17]),  # decode: empty cache, one key, page boundary, one past it
    ([3, 1, 0, 5], [3, 40, 9, 16]),  # extend / mixed, a q-less entry, prefix == q (no prefix)
    ([7, 2], [7, 33]),
]


@pytest.mark.parametrize("page_size", [1, 3, 16])
@pytest.mark.parametrize("lens", RAGGED)
@pytest.mark.parametrize("causal", [True, False])
def test_ragged_paged(page_size, lens, causal, reference):
    q_lens, kv_lens = lens
    kv_lens = [max(k, q) for k, q in zip(kv_lens, q_lens)]
    run_case(PagedCase(q_lens, kv_lens, page_size=page_size, seed=page_size + 7 * causal),
             reference, causal=causal)


@pytest.mark.parametrize("window", [(0, 0), (3, 0), (5, 2), (-1, 1)])
def test_window_softcap_gqa(window, reference):
    case = PagedCase([4, 1, 6], [9, 20, 6], heads=8, heads_kv=2, page_size=4, seed=3)
    run_case(case, reference, causal=window[1] == 0, window=window, softcap=5.0, scale=0.2)


def test_mqa_and_float16(reference):
    case = PagedCase([2, 5], [30, 5], heads=6, heads_kv=1, page_size=8, dtype="float16", seed=4)
    run_case(case, reference, causal=True)


def test_batch_form_lse_layout(reference):
    case = PagedCase([3, 3, 3], [5, 3, 18], page_size=4, seed=5)
    run_case(case, reference, varlen=False)


def test_mla_absorbed_qv(reference):
    # q = rope part (64), qv = nope part paired with c_kv (v_cache, 512 wide); one KV head.
    case = PagedCase([1, 2, 1], [17, 5, 1], heads=4, heads_kv=1, head_dim=64, head_dim_v=512,
                     page_size=16, seed=6)
    run_case(case, reference, causal=True, mla=True)


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_cache_uint8_with_descale(fmt, reference):
    case = PagedCase([1, 3, 2], [12, 3, 33], page_size=16, kv_fmt=fmt, seed=8)
    run_case(case, reference, causal=True, descale=True, window=(6, 0))


def test_fp8_broadcast_scalar_descale(reference):
    case = PagedCase([2, 1], [5, 17], page_size=16, kv_fmt="fp8_e4m3", seed=9)
    run_case(case, reference, causal=True, descale=True, scalar_descale=True)


def test_descale_ignored_for_float_cache(reference):
    # FA3 reads k/v descale only for fp8 caches; code that passes them anyway must still work.
    case = PagedCase([2], [5], page_size=4, seed=10)
    run_case(case, reference, causal=True, descale=True)


@pytest.mark.parametrize("page_size", [1, 4])
def test_append_varlen_new_kv(page_size, reference):
    # New keys land at cache_seqlens[b].. (across a page boundary for entry 1), then attend.
    case = PagedCase([2, 3, 1, 0], [3, 2, 0, 4], append=[2, 3, 1, 0], page_size=page_size, seed=11)
    a = run_case(case, reference, causal=True)
    # The cache now holds the new rows, bit for bit, at the right slots.
    P, table = page_size, a["page_table"]
    t = 0
    for b, n in enumerate(case.append):
        for j in range(n):
            pos = case.kv_lens[b] + j
            slot = (table[b, pos // P], pos % P)
            np.testing.assert_array_equal(a["k_cache"][slot], a["k_new"][t])
            np.testing.assert_array_equal(a["v_cache"][slot], a["v_new"][t])
            t += 1


def test_append_batch_form_no_page_table(reference):
    # [B, S, Hk, D] cache without a page table, new k/v in batch form, cache_batch_idx rows.
    rng = np.random.default_rng(12)
    B, S, H, Hk, D, s_new = 3, 12, 4, 2, 32, 2
    k_cache = np.full((4, S, Hk, D), np.nan, np.float32)
    v_cache = np.full((4, S, Hk, D), np.nan, np.float32)
    seqlens = np.array([0, 5, 10], np.int32)
    rows = np.array([2, 0, 3], np.int32)
    for b in range(B):
        k_cache[rows[b], : seqlens[b]] = rng.standard_normal((seqlens[b], Hk, D))
        v_cache[rows[b], : seqlens[b]] = rng.standard_normal((seqlens[b], Hk, D))
    q = rng.standard_normal((B, s_new, H, D)).astype(np.float32)
    k = rng.standard_normal((B, s_new, Hk, D)).astype(np.float32)
    v = rng.standard_normal((B, s_new, Hk, D)).astype(np.float32)
    out, lse = flashback.flash_attn_with_kvcache(
        q, k_cache, v_cache, k=k, v=v, cache_seqlens=seqlens, cache_batch_idx=rows, causal=True,
        return_softmax_lse=True, reference=reference)
    assert lse.shape == (B, H, s_new)
    for b in range(B):
        n = seqlens[b] + s_new
        kk, vv = as_f64(k_cache[rows[b], :n]), as_f64(v_cache[rows[b], :n])
        np.testing.assert_array_equal(k_cache[rows[b], seqlens[b] : n], k[b])
        o, l = attention_ref(as_f64(q[b]), kk, vv, causal=True)
        assert_close(out[b], o, "float32")
        assert_lse_close(lse[b], l.T)


def test_int_cache_seqlens_and_strided_q(reference):
    # cache_seqlens as a Python int; q a strided view (q_all[..., R:], as the seed's MLA path).
    rng = np.random.default_rng(13)
    B, S, H, D = 2, 8, 2, 16
    k_cache = rng.standard_normal((B, S, H, D)).astype(np.float32)
    v_cache = rng.standard_normal((B, S, H, D)).astype(np.float32)
    q_all = rng.standard_normal((B, 1, H, 3 * D)).astype(np.float32)
    q = q_all[..., 2 * D :]
    out = flashback.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=6, causal=True,
                                            reference=reference)
    for b in range(B):
        o, _ = attention_ref(as_f64(q[b]), as_f64(k_cache[b, :6]), as_f64(v_cache[b, :6]), causal=True)
        assert_close(out[b], o, "float32")


def test_unsupported_arguments_are_named():
    a = PagedCase([1], [4], page_size=4).build()
    args = (a["q"], a["k_cache"], a["v_cache"])
    kw = dict(cache_seqlens=a["cache_seqlens"], page_table=a["page_table"], cu_seqlens_q=a["cu_seqlens_q"])
    for name, value in [("rotary_cos", a["q"]), ("cache_leftpad", a["cache_seqlens"]),
                        ("scheduler_metadata", a["cache_seqlens"]), ("attention_chunk", 8)]:
        with pytest.raises(NotImplementedError, match=name):
            flashback.flash_attn_with_kvcache(*args, **kw, **{name: value})


def test_bad_input_names_the_argument():
    a = PagedCase([2], [4], page_size=4).build()
    with pytest.raises(flashback.Error, match="cache_seqlens"):
        flashback.flash_attn_with_kvcache(
            a["q"], a["k_cache"], a["v_cache"], cache_seqlens=np.array([99], np.int32),
            page_table=a["page_table"], cu_seqlens_q=a["cu_seqlens_q"])
    with pytest.raises(flashback.Error, match="page_table"):
        flashback.flash_attn_with_kvcache(
            a["q"], a["k_cache"], a["v_cache"], cache_seqlens=a["cache_seqlens"],
            page_table=a["page_table"].astype(np.float32), cu_seqlens_q=a["cu_seqlens_q"])
    with pytest.raises(flashback.Error, match="kv_dtype"):
        flashback.flash_attn_with_kvcache(
            a["q"], a["k_cache"], a["v_cache"], cache_seqlens=a["cache_seqlens"],
            page_table=a["page_table"], cu_seqlens_q=a["cu_seqlens_q"], kv_dtype="fp4")
    with pytest.raises(TypeError, match="not supported"):
        flashback.flash_attn_with_kvcache(a["q"].tolist(), a["k_cache"], a["v_cache"])
