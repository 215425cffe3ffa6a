"""The tests' own float64 NumPy reference for FlashAttention-3 semantics (SPEC.md §2), and random
paged-cache cases. Written independently of the C++ oracle so the Python layer's shape mapping
(batch form, varlen, page tables, appending k/v, LSE layout) is checked end to end."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# Tolerances of DESIGN.md: relative L2 error and max-abs error of the output, abs error of LSE.
TOL = {
    "float32": (1e-5, 1e-4),
    "float16": (1e-2, 2e-2),
    "bfloat16": (1e-2, 2e-2),
}
LSE_TOL = 1e-3

# Byte patterns that decode to NaN: used to poison cache slots that must never be read.
FP8_NAN = 0x7F


def decode_fp8(b: np.ndarray, fmt: str) -> np.ndarray:
    """uint8 codes -> float64 values of OCP fp8 e4m3fn / e5m2."""
    b = b.astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    if fmt == "fp8_e4m3":
        e, m, bias, mbits = (b >> 3) & 0xF, b & 0x7, 7, 3
        nan = (e == 0xF) & (m == 0x7)
        inf = np.zeros_like(nan)
    else:
        e, m, bias, mbits = (b >> 2) & 0x1F, b & 0x3, 15, 2
        nan = (e == 0x1F) & (m != 0)
        inf = (e == 0x1F) & (m == 0)
    normal = (1.0 + m / (1 << mbits)) * np.exp2(e.astype(np.float64) - bias)
    sub = (m / (1 << mbits)) * 2.0 ** (1 - bias)
    val = sign * np.where(e == 0, sub, normal)
    val = np.where(inf, sign * np.inf, val)
    return np.where(nan, np.nan, val)


def random_fp8_codes(rng, shape, fmt: str) -> np.ndarray:
    """Random finite fp8 codes with magnitudes in a sane range (|x| <= ~16)."""
    codes = rng.integers(0, 256, size=shape, dtype=np.uint8)
    # Clear the top exponent bit so values stay finite and moderate, keep sign/mantissa random.
    codes &= np.uint8(0xBF)
    return codes


def as_f64(x) -> np.ndarray:
    """float64 copy of a NumPy array or a PyTorch tensor (any device, any float dtype)."""
    if type(x).__module__.startswith("torch"):
        return x.detach().float().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def attention_ref(q, k, v, *, causal, window=(-1, -1), softcap=0.0, scale=None, qv=None):
    """One batch entry. q [Lq, H, D], k [Lk, Hk, D], v [Lk, Hk, Dv], qv [Lq, H, Dv] (MLA).
    Returns out [Lq, H, Dv] and natural-log LSE [Lq, H] (-inf for rows with no visible key)."""
    lq, h, d = q.shape
    lk, hk, dv = v.shape
    if scale is None:
        scale = 1.0 / math.sqrt(d + (qv.shape[-1] if qv is not None else 0))
    r = h // hk
    kk = np.repeat(k, r, axis=1)
    vv = np.repeat(v, r, axis=1)
    s = np.einsum("qhd,khd->hqk", q, kk)
    if qv is not None:
        s = s + np.einsum("qhd,khd->hqk", qv, vv)
    s = s * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    mask = np.ones((lq, lk), dtype=bool)
    for i in range(lq):
        pos = lk - lq + i
        lo, hi = 0, lk - 1
        if causal:
            hi = min(hi, pos)
        if window[0] >= 0:
            lo = max(lo, pos - window[0])
        if window[1] >= 0:
            hi = min(hi, pos + window[1])
        mask[i] = False
        if hi >= lo:
            mask[i, max(lo, 0) : hi + 1] = True
    s = np.where(mask[None], s, -np.inf)
    out = np.zeros((lq, h, dv))
    lse = np.full((lq, h), -np.inf)
    for hh in range(h):
        for i in range(lq):
            row = s[hh, i]
            if not mask[i].any():
                continue
            m = row.max()
            p = np.exp(row - m)
            total = p.sum()
            out[i, hh] = (p / total) @ vv[:, hh]
            lse[i, hh] = m + math.log(total)
    return out, lse


def assert_close(out, ref, dtype_name, what="out"):
    out = as_f64(out)
    assert out.shape == ref.shape, f"{what}: shape {out.shape} != {ref.shape}"
    assert not np.isnan(out).any(), f"{what}: NaN in output (unwritten or poisoned element)"
    rel_tol, abs_tol = TOL[dtype_name]
    err = np.abs(out - ref)
    denom = np.linalg.norm(ref)
    rel = np.linalg.norm(out - ref) / denom if denom > 0 else np.linalg.norm(out - ref)
    assert rel <= rel_tol, f"{what}: relative error {rel:.3g} > {rel_tol}"
    assert err.max(initial=0) <= abs_tol, f"{what}: max abs error {err.max():.3g} > {abs_tol}"


def assert_lse_close(lse, ref):
    lse = as_f64(lse)
    assert lse.shape == ref.shape, f"lse: shape {lse.shape} != {ref.shape}"
    assert not np.isnan(lse).any(), "lse: NaN"
    empty = np.isneginf(ref)
    assert np.array_equal(np.isneginf(lse), empty), "lse: -inf where (and only where) no key is seen"
    if (~empty).any():
        err = np.abs(lse[~empty] - ref[~empty]).max()
        assert err <= LSE_TOL, f"lse: max abs error {err:.3g} > {LSE_TOL}"


@dataclass
class PagedCase:
    """A random paged KV cache: pages placed at random, unused slots poisoned with NaN."""

    q_lens: list
    kv_lens: list  # keys already in the cache (before any appended k/v)
    heads: int = 4
    heads_kv: int = 2
    head_dim: int = 64
    head_dim_v: int | None = None
    page_size: int = 16
    dtype: str = "float32"
    kv_fmt: str | None = None  # None: cache in `dtype`; "fp8_e4m3" / "fp8_e5m2": uint8 codes
    extra_pages: int = 3
    append: list | None = None  # new keys per entry (to be appended by the call), or None
    seed: int = 0
    arrays: dict = field(default_factory=dict)

    def build(self):
        rng = np.random.default_rng(self.seed)
        dv = self.head_dim_v or self.head_dim
        batch, P = len(self.q_lens), self.page_size
        final = [kv + (self.append[b] if self.append else 0) for b, kv in enumerate(self.kv_lens)]
        pages_per = [-(-n // P) for n in final]
        width = max(pages_per + [1])
        num_pages = sum(pages_per) + self.extra_pages
        perm = rng.permutation(num_pages)
        table = np.zeros((batch, width), np.int32)
        # Unused table entries point at a random page: they must never be read.
        table[:] = rng.integers(0, num_pages, size=table.shape)
        nxt = 0
        for b, n in enumerate(pages_per):
            table[b, :n] = perm[nxt : nxt + n]
            nxt += n
        shape_k = (num_pages, P, self.heads_kv, self.head_dim)
        shape_v = (num_pages, P, self.heads_kv, dv)
        if self.kv_fmt:
            k_cache = np.full(shape_k, FP8_NAN, np.uint8)
            v_cache = np.full(shape_v, FP8_NAN, np.uint8)
        else:
            k_cache = np.full(shape_k, np.nan, self.dtype)
            v_cache = np.full(shape_v, np.nan, self.dtype)
        for b, n in enumerate(self.kv_lens):
            for p in range(n):
                page, off = table[b, p // P], p % P
                if self.kv_fmt:
                    k_cache[page, off] = random_fp8_codes(rng, shape_k[2:], self.kv_fmt)
                    v_cache[page, off] = random_fp8_codes(rng, shape_v[2:], self.kv_fmt)
                else:
                    k_cache[page, off] = rng.standard_normal(shape_k[2:])
                    v_cache[page, off] = rng.standard_normal(shape_v[2:])
        total_q = sum(self.q_lens)
        q = rng.standard_normal((total_q, self.heads, self.head_dim)).astype(self.dtype)
        cu_q = np.concatenate([[0], np.cumsum(self.q_lens)]).astype(np.int32)
        a = dict(q=q, k_cache=k_cache, v_cache=v_cache, page_table=table, cu_seqlens_q=cu_q,
                 cache_seqlens=np.array(self.kv_lens, np.int32), rng=rng)
        if self.append:
            n_new = sum(self.append)
            a["k_new"] = rng.standard_normal((n_new, self.heads_kv, self.head_dim)).astype(self.dtype)
            a["v_new"] = rng.standard_normal((n_new, self.heads_kv, dv)).astype(self.dtype)
            a["cu_new"] = np.concatenate([[0], np.cumsum(self.append)]).astype(np.int32)
        self.arrays = a
        return a

    def keys(self, b, k_cache, v_cache, n, k_descale=None, v_descale=None):
        """Logical float64 K/V of entry b (first n positions) read from the given caches."""
        P, table = self.page_size, self.arrays["page_table"]
        pos = np.arange(n)
        pages, offs = table[b, pos // P], pos % P
        k, v = as_f64_cache(k_cache, self.kv_fmt)[pages, offs], as_f64_cache(v_cache, self.kv_fmt)[pages, offs]
        if k_descale is not None:
            k = k * k_descale[b][None, :, None]
            v = v * v_descale[b][None, :, None]
        return k, v


def as_f64_cache(cache, fmt):
    if fmt:
        c = cache
        if type(c).__module__.startswith("torch"):
            import torch

            c = c.view(torch.uint8).cpu().numpy()
        return decode_fp8(np.asarray(c), fmt)
    return as_f64(cache)
