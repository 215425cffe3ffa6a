"""flashback.AttentionBackend driven from Python the way an engine drives it: a req_to_token
pool with pages placed at random, EXTEND (with cached prefixes) then DECODE steps, MHA (full and
sliding-window) and absorbed MLA; outputs against the tests' float64 reference over each
request's dense history, and the cache checked to hold this step's K/V."""

import numpy as np
import pytest
from reference import assert_close, assert_lse_close, attention_ref

import flashback
from flashback import ForwardBatch, ForwardMode


class Engine:
    def __init__(self, page_size, *, mla=False, window=-1, seed=0, dims=None):
        """dims: (D, Dv) instead of the small defaults (CUDA builds only some head dims)."""
        self.rng = np.random.default_rng(seed)
        self.P, self.mla = page_size, mla
        self.H, self.Hk = (4, 1) if mla else (4, 2)
        self.D, self.Dv = dims if dims else (24, 16) if mla else (16, 8)
        self.max_ctx, num_pages = 32, 40 * (8 // page_size if page_size < 8 else 1)
        self.req_to_token = np.zeros((4, self.max_ctx), np.int32)
        self.rows = np.array([2, 0, 3], np.int32)
        pages = self.rng.permutation(np.arange(1, num_pages))  # page 0 is the reserved dummy
        per_req = -(-self.max_ctx // self.P)
        for i, r in enumerate(self.rows):
            mine = pages[i * per_req : (i + 1) * per_req]
            t = np.arange(self.max_ctx)
            self.req_to_token[r] = mine[t // self.P] * self.P + t % self.P
        cols = self.D if mla else self.D
        self.k_cache = np.full((num_pages, self.P, self.Hk, cols), np.nan, np.float32)
        self.v_cache = None if mla else np.full((num_pages, self.P, self.Hk, self.Dv), np.nan,
                                                np.float32)
        self.hist_k = [np.zeros((0, self.Hk, self.D)) for _ in self.rows]
        self.hist_v = [np.zeros((0, self.Hk, self.Dv)) for _ in self.rows]
        self.layer = flashback.Layer(num_q_heads=self.H, num_kv_heads=self.Hk, head_dim=self.D,
                                     v_head_dim=self.Dv, scaling=0.3, sliding_window_size=window)
        self.window = window

    def slot(self, i, t):
        s = int(self.req_to_token[self.rows[i], t])
        return s // self.P, s % self.P

    def prefill_cache(self, lens):
        """Tokens already cached before the first step (written directly, as a prior pass)."""
        for i, n in enumerate(lens):
            k = self.rng.standard_normal((n, self.Hk, self.D)).astype(np.float32)
            v = k[..., : self.Dv] if self.mla else self.rng.standard_normal(
                (n, self.Hk, self.Dv)).astype(np.float32)
            for t in range(n):
                self.k_cache[self.slot(i, t)] = k[t]
                if not self.mla:
                    self.v_cache[self.slot(i, t)] = v[t]
            self.hist_k[i], self.hist_v[i] = k.astype(np.float64), v.astype(np.float64)

    def step(self, backend, mode, new):
        have = [h.shape[0] for h in self.hist_k]
        seq = np.array([a + b for a, b in zip(have, new)], np.int32)
        loc = np.array([self.req_to_token[self.rows[i], t] for i in range(len(new))
                        for t in range(have[i], have[i] + new[i])], np.int32)
        T = int(sum(new))
        q = self.rng.standard_normal((T, self.H, self.D)).astype(np.float32)
        k = self.rng.standard_normal((T, self.Hk, self.D)).astype(np.float32)
        v = None if self.mla else self.rng.standard_normal((T, self.Hk, self.Dv)).astype(np.float32)
        batch = ForwardBatch(
            forward_mode=mode, batch_size=len(new), req_to_token=self.req_to_token,
            req_pool_indices=self.rows, seq_lens=seq, out_cache_loc=loc,
            extend_seq_lens=None if mode == ForwardMode.DECODE else np.array(new, np.int32),
            extend_prefix_lens=None if mode == ForwardMode.DECODE else np.array(have, np.int32))
        backend.init_forward_metadata(batch)
        out, lse = backend.forward(q, k, v, self.layer, batch, self.k_cache, self.v_cache,
                                   return_lse=True)
        assert out.shape == (T, self.H, self.Dv)

        t0 = 0
        for i, n in enumerate(new):
            kn = k[t0 : t0 + n].astype(np.float64)
            vn = kn[..., : self.Dv] if self.mla else v[t0 : t0 + n].astype(np.float64)
            self.hist_k[i] = np.concatenate([self.hist_k[i], kn])
            self.hist_v[i] = np.concatenate([self.hist_v[i], vn])
            for j in range(n):  # the backend wrote this step's rows into the cache
                np.testing.assert_array_equal(self.k_cache[self.slot(i, have[i] + j)], k[t0 + j])
            ref_o, ref_l = attention_ref(q[t0 : t0 + n].astype(np.float64), self.hist_k[i],
                                         self.hist_v[i], causal=True, window=(self.window, 0),
                                         scale=0.3)
            assert_close(out[t0 : t0 + n], ref_o, "float32", f"{mode} request {i}")
            assert_lse_close(lse[t0 : t0 + n], ref_l)
            t0 += n


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("kind", ["mha", "window", "mla"])
def test_backend_extend_then_decode(page_size, kind):
    eng = Engine(page_size, mla=kind == "mla", window=3 if kind == "window" else -1, seed=page_size)
    eng.prefill_cache([3, 0, 6])
    backend = flashback.AttentionBackend(page_size=page_size)
    eng.step(backend, ForwardMode.EXTEND, [2, 5, 1])  # extend over cached prefixes (and none)
    eng.step(backend, ForwardMode.EXTEND, [1, 2, 4])
    for _ in range(3):
        eng.step(backend, ForwardMode.DECODE, [1, 1, 1])


def test_backend_bad_batch_is_named():
    eng = Engine(1)
    backend = flashback.AttentionBackend(page_size=1)
    batch = ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=3,
                         req_to_token=eng.req_to_token, req_pool_indices=eng.rows,
                         seq_lens=np.array([1, 2], np.int32), out_cache_loc=np.zeros(3, np.int32))
    with pytest.raises(flashback.Error, match="seq_lens"):
        backend.init_forward_metadata(batch)
