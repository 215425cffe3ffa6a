"""flash_attn_varlen_func, merge_state and kv_store on NumPy arrays, against float64 references."""

import numpy as np
import pytest
from reference import assert_close, assert_lse_close, attention_ref, decode_fp8

import flashback


@pytest.mark.parametrize("causal", [True, False])
def test_varlen_func_ragged(causal, reference):
    # q/k head dim 192, v head dim 128 (MLA chunked-prefix MHA); lengths incl. 0 and 1.
    rng = np.random.default_rng(20)
    q_lens, k_lens = [3, 0, 1, 5], [3, 4, 1, 9]
    H, Hk, D, Dv = 4, 2, 192, 128
    q = rng.standard_normal((sum(q_lens), H, D)).astype(np.float32)
    k = rng.standard_normal((sum(k_lens), Hk, D)).astype(np.float32)
    v = rng.standard_normal((sum(k_lens), Hk, Dv)).astype(np.float32)
    cu_q = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(k_lens)]).astype(np.int32)
    out, lse = flashback.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, max(q_lens), max(k_lens), causal=causal, softmax_scale=0.1,
        return_softmax_lse=True, reference=reference)
    assert lse.shape == (H, sum(q_lens))
    outs, lses = [], []
    for b in range(len(q_lens)):
        o, l = attention_ref(q[cu_q[b] : cu_q[b + 1]].astype(np.float64),
                             k[cu_k[b] : cu_k[b + 1]].astype(np.float64),
                             v[cu_k[b] : cu_k[b + 1]].astype(np.float64), causal=causal, scale=0.1)
        outs.append(o)
        lses.append(l)
    assert_close(out, np.concatenate(outs), "float32")
    assert_lse_close(lse, np.concatenate(lses).T)


def test_varlen_func_unsupported():
    z = np.zeros((1, 1, 8), np.float32)
    cu = np.array([0, 1], np.int32)
    with pytest.raises(NotImplementedError, match="seqused_k"):
        flashback.flash_attn_varlen_func(z, z, z, cu, cu, 1, 1, seqused_k=cu)
    with pytest.raises(NotImplementedError, match="qv"):
        flashback.flash_attn_varlen_func(z, z, z, cu, cu, 1, 1, qv=z)


def test_merge_state(reference):
    rng = np.random.default_rng(21)
    T, H, D = 5, 3, 16
    va, vb = rng.standard_normal((2, T, H, D)).astype(np.float32)
    sa, sb = rng.standard_normal((2, T, H)).astype(np.float32) * 3
    sa[0, 0] = -np.inf  # an empty part: the other passes through
    sb[1, 1] = np.inf   # FlashAttention's +inf empty marker: treated as empty too
    sa[2, 2] = sb[2, 2] = -np.inf  # both empty
    v, s = flashback.merge_state(va, sa, vb, sb, reference=reference)
    a, b = sa.astype(np.float64), sb.astype(np.float64)
    a[np.isposinf(a)], b[np.isposinf(b)] = -np.inf, -np.inf
    ref_s = np.logaddexp(a, b)
    with np.errstate(invalid="ignore"):
        wa = np.where(np.isneginf(a), 0.0, np.exp(a - ref_s))
        wb = np.where(np.isneginf(b), 0.0, np.exp(b - ref_s))
    ref_v = wa[..., None] * va + wb[..., None] * vb
    ref_v[2, 2] = 0.0
    assert_lse_close(s, ref_s)
    np.testing.assert_allclose(v[~np.isneginf(ref_s)], ref_v[~np.isneginf(ref_s)], rtol=1e-5, atol=1e-5)
    assert np.isfinite(v).all()

    # In place into a's buffers (v_merged / s_merged may alias v_a / s_a).
    va2, sa2 = va.copy(), sa.copy()
    flashback.merge_state(va2, sa2, vb, sb, va2, sa2, reference=reference)
    np.testing.assert_array_equal(va2, v)


@pytest.mark.parametrize("paged", [False, True])
def test_kv_store(paged, reference):
    rng = np.random.default_rng(22)
    slots, Hk, D, Dv, P = 24, 2, 8, 4, 4
    k = rng.standard_normal((5, Hk, D)).astype(np.float32)
    v = rng.standard_normal((5, Hk, Dv)).astype(np.float32)
    loc = rng.permutation(slots)[:5].astype(np.int64)
    kc = np.full((slots, Hk, D), np.nan, np.float32)
    vc = np.full((slots, Hk, Dv), np.nan, np.float32)
    kc_arg = kc.reshape(slots // P, P, Hk, D) if paged else kc
    vc_arg = vc.reshape(slots // P, P, Hk, Dv) if paged else vc
    flashback.kv_store(k, v, loc, kc_arg, vc_arg, reference=reference)
    np.testing.assert_array_equal(kc[loc], k)
    np.testing.assert_array_equal(vc[loc], v)
    untouched = np.setdiff1d(np.arange(slots), loc)
    assert np.isnan(kc[untouched]).all() and np.isnan(vc[untouched]).all()


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_kv_store_fp8_mla(fmt, reference):
    # MLA: latent rows in k, no v; fp8 cache as uint8 with the format named; x / k_scale stored.
    rng = np.random.default_rng(23)
    k = rng.standard_normal((6, 1, 576)).astype(np.float32)
    k_before = k.copy()
    loc = np.array([3, 0, 7, 1, 5, 2], np.int32)
    cache = np.zeros((8, 1, 576), np.uint8)
    flashback.kv_store(k, None, loc, cache, None, k_scale=0.5, kv_dtype=fmt, reference=reference)
    np.testing.assert_array_equal(k, k_before)  # the caller's tensor is not modified
    stored = decode_fp8(cache[loc], fmt)
    want = k / 0.5
    # Round-to-nearest fp8: within half a step (relative 2^-4 for e4m3, 2^-3 for e5m2).
    rel = 2.0 ** -4 if fmt == "fp8_e4m3" else 2.0 ** -3
    assert np.all(np.abs(stored - want) <= rel * np.abs(want) + 2.0 ** -9)
    assert (cache[[4, 6]] == 0).all()  # slots not in loc are untouched


def test_kv_store_bad_slot_named():
    k = np.zeros((1, 1, 8), np.float32)
    with pytest.raises(flashback.Error, match="loc"):
        flashback.kv_store(k, k, np.array([9], np.int32), np.zeros((4, 1, 8), np.float32),
                           np.zeros((4, 1, 8), np.float32))
