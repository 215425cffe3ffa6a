"""PyTorch tensors: on the CPU wherever PyTorch is installed, and on CUDA (the H200 run,
tests/python/run_h200.sh). CUDA results are compared with the fp64 CPU oracle
(reference=True) run on CPU copies of the same inputs, and with the tests' NumPy reference."""

import numpy as np
import pytest
from reference import PagedCase, as_f64, assert_close, assert_lse_close, attention_ref

import flashback

torch = pytest.importorskip("torch")

FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def t(x, device, dtype=None):
    """A numpy array as a torch tensor on `device` (uint8 fp8 codes stay uint8 unless dtype)."""
    r = torch.from_numpy(np.ascontiguousarray(x)).to(device)
    if dtype is not None:
        r = r.view(dtype) if x.dtype == np.uint8 else r.to(dtype)
    return r


def call_or_skip(fn, *args, **kwargs):
    """Runs fn; a build of flashback without CUDA kernels is a skip (reported), not a pass."""
    try:
        return fn(*args, **kwargs)
    except flashback.Error as e:
        if "no CUDA support" in str(e):
            pytest.skip(f"this build of flashback has no CUDA kernels: {e}")
        raise


def to_cpu(x):
    return x.cpu() if isinstance(x, torch.Tensor) else x


def seed_style_call(a, case, device, *, mla, lse=True, window=(-1, -1), softcap=0.0,
                    descale=True, reference=False, q_dtype=torch.bfloat16, extra=None):
    """flash_attn_with_kvcache called the way SGLang's FlashAttention backend calls FA3."""
    batch = len(case.q_lens)
    kwargs = {}
    if mla:
        # One latent buffer [slots, 1, 512 + 64]; q_all [tokens, H, 512 + 64]; the rope part goes
        # in as q/k, the nope part as qv/v — strided views, as the seed passes them.
        q_all = a["q_all"].to(device)
        q = q_all[:, :, 512:]
        kwargs["qv"] = q_all[:, :, :512]
        kv = a["kv_latent"].to(device)
        k_cache = kv[..., 512:]
        v_cache = kv[..., :512]
    else:
        q = t(a["q"], device, q_dtype)
        k_cache = t(a["k_cache"], device, FP8.get(case.kv_fmt, q_dtype))
        v_cache = t(a["v_cache"], device, FP8.get(case.kv_fmt, q_dtype))
    if descale:
        # layer.k_scale.expand(B, Hk): a stride-0 view of a one-element tensor.
        kwargs["k_descale"] = a["k_scale"].to(device).expand(batch, case.heads_kv)
        kwargs["v_descale"] = a["v_scale"].to(device).expand(batch, case.heads_kv)
    kwargs = dict(
        q=q,
        k_cache=k_cache,
        v_cache=v_cache,
        page_table=t(a["page_table"], device),
        cache_seqlens=t(a["cache_seqlens"], device),
        cu_seqlens_q=t(a["cu_seqlens_q"], device),
        cu_seqlens_k_new=t(a["cu_seqlens_q"], device),  # passed by the seed; no k given
        max_seqlen_q=max(case.q_lens),
        softmax_scale=a["scale"],
        causal=True,
        window_size=window,
        softcap=softcap,
        return_softmax_lse=lse,
        reference=reference,
        **kwargs,
    )
    kwargs.update(extra or {})
    return flashback.flash_attn_with_kvcache(**kwargs)


def make_seed_case(q_lens, kv_lens, *, mla, fmt="fp8_e4m3", seed=0, page_size=16):
    if mla:
        case = PagedCase(q_lens, kv_lens, heads=16, heads_kv=1, head_dim=576, head_dim_v=576,
                         page_size=page_size, kv_fmt=fmt, seed=seed)
        a = case.build()
        rng = a["rng"]
        # Latent cache: k_cache of the case holds [c_kv (512) | k_rope (64)] codes per slot.
        dt = FP8[fmt] if fmt else torch.bfloat16
        kv = a["k_cache"]
        a["kv_latent"] = torch.from_numpy(kv).view(dt) if fmt else torch.from_numpy(kv).to(dt)
        a["q_all"] = torch.from_numpy(
            rng.standard_normal((sum(q_lens), 16, 576)).astype(np.float32)).to(torch.bfloat16)
        a["scale"] = 1.0 / np.sqrt(64 + 512)
    else:
        case = PagedCase(q_lens, kv_lens, heads=8, heads_kv=2, head_dim=128, page_size=page_size,
                         kv_fmt=fmt, seed=seed)
        a = case.build()
        a["scale"] = 1.0 / np.sqrt(128)
    a["k_scale"] = torch.tensor([0.75], dtype=torch.float32)
    # MLA: one scale for the latent row, passed as both k_descale and v_descale (SPEC.md §2).
    a["v_scale"] = torch.tensor([0.75 if mla else 1.25], dtype=torch.float32)
    return case, a


def numpy_reference(case, a, *, mla, window=(-1, -1), softcap=0.0, descale=True):
    """Float64 reference of seed_style_call (q as bf16 values)."""
    ks = float(a["k_scale"]) if (descale and case.kv_fmt) else 1.0
    vs = float(a["v_scale"]) if (descale and case.kv_fmt) else 1.0
    cu = a["cu_seqlens_q"]
    outs, lses = [], []
    for b in range(len(case.q_lens)):
        k, v = case.keys(b, a["k_cache"], a["v_cache"], case.kv_lens[b])
        if mla:
            q_all = as_f64(a["q_all"][cu[b] : cu[b + 1]])
            q, qv = q_all[:, :, 512:], q_all[:, :, :512]
            lat = k * ks  # one scale for the whole latent row (k_descale)
            o, l = attention_ref(q, lat[:, :, 512:], lat[:, :, :512], causal=True, window=window,
                                 softcap=softcap, scale=a["scale"], qv=qv)
        else:
            q = as_f64(torch.from_numpy(a["q"][cu[b] : cu[b + 1]]).to(torch.bfloat16))
            o, l = attention_ref(q, k * ks, v * vs, causal=True, window=window, softcap=softcap,
                                 scale=a["scale"])
        outs.append(o)
        lses.append(l)
    return np.concatenate(outs), np.concatenate(lses).T


# ---------------------------------------------------------------------------------------------
# PyTorch on the CPU.


@pytest.mark.parametrize("mla", [False, True])
def test_torch_cpu_seed_style_fp8(mla, reference):
    case, a = make_seed_case([1, 1, 3], [17, 1, 40], mla=mla, seed=1)
    out, lse = seed_style_call(a, case, "cpu", mla=mla, window=(-1, -1) if mla else (20, 0),
                               softcap=0.0 if mla else 30.0, reference=reference)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    ref_out, ref_lse = numpy_reference(case, a, mla=mla, window=(-1, -1) if mla else (20, 0),
                                       softcap=0.0 if mla else 30.0)
    assert_close(out, ref_out, "bfloat16")
    assert_lse_close(lse, ref_lse)


def test_torch_cpu_kv_store_in_place_and_fp8_q_upcast():
    # kv_store writes into the caller's torch tensor (zero-copy view of the cache).
    k = torch.randn(3, 2, 16, dtype=torch.bfloat16)
    cache = torch.zeros(8, 2, 16, dtype=torch.float8_e4m3fn)
    flashback.kv_store(k, None, torch.tensor([5, 0, 2]), cache, None, k_scale=2.0)
    got = cache[[5, 0, 2]].float()
    assert torch.allclose(got, (k.float() / 2.0).to(torch.float8_e4m3fn).float())
    assert (cache[[1, 3, 4, 6, 7]].float() == 0).all()

    # An fp8 q (the seed casts q to the cache dtype) is upcast: same result as its bf16 value.
    case, a = make_seed_case([1, 2], [9, 4], mla=False, seed=2)
    q8 = torch.from_numpy(a["q"]).to(torch.float8_e4m3fn)
    a["q"] = q8.float().numpy()
    out_bf16 = seed_style_call(a, case, "cpu", mla=False, lse=False)
    out_fp8 = seed_style_call(a, case, "cpu", mla=False, lse=False,
                              extra={"q": q8})
    assert out_fp8.dtype == torch.bfloat16
    assert torch.equal(out_fp8, out_bf16)


def test_torch_cpu_fp8_q_with_q_descale_and_grad():
    # FA3's fp8 q with q_descale [B, Hk]: flashback computes with bf16(q * descale) instead; a q
    # that requires grad is accepted (inference only; no copy).
    case, a = make_seed_case([2, 1], [7, 12], mla=False, seed=13)
    q8 = torch.from_numpy(a["q"]).to(torch.float8_e4m3fn)
    qd = torch.tensor([[0.5, 2.0], [1.5, 0.25]])  # [B, Hk]; heads 0-3 use kv head 0, 4-7 head 1
    rows = torch.tensor([0, 0, 1])
    scaled = q8.float() * qd[rows].repeat_interleave(4, dim=1)[:, :, None]
    a["q"] = scaled.to(torch.bfloat16).float().numpy()
    want = seed_style_call(a, case, "cpu", mla=False, lse=False)
    got = seed_style_call(a, case, "cpu", mla=False, lse=False, extra={"q": q8, "q_descale": qd})
    assert torch.equal(got, want)
    q_grad = torch.from_numpy(a["q"]).to(torch.bfloat16).requires_grad_()
    got = seed_style_call(a, case, "cpu", mla=False, lse=False, extra={"q": q_grad})
    assert torch.equal(got, want)


# ---------------------------------------------------------------------------------------------
# CUDA.


def compare_with_oracle(fn_cuda, fn_cpu, dtype_name="bfloat16", lse=True):
    res = call_or_skip(fn_cuda)
    torch.cuda.synchronize()
    ref = fn_cpu()
    out, ref_out = (res[0], ref[0]) if lse else (res, ref)
    assert out.is_cuda
    assert_close(out, as_f64(ref_out), dtype_name)
    if lse:
        assert res[1].is_cuda
        assert_lse_close(res[1], as_f64(ref[1]))
    return res


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("mla", [False, True], ids=["mha", "mla"])
@pytest.mark.parametrize("page_size", [1, 16])
def test_cuda_seed_decode(mla, page_size):
    """The acceptance test: flash_attn_with_kvcache called as the seed's forward_decode does —
    page table, cu_seqlens, sliding window, softcap, FP8 cache with expand()ed descale, qv for
    MLA, q left in bf16 — on ragged lengths (0, 1, page boundaries, long)."""
    kv_lens = [1, 16, 17, 300, 33, 64]
    q_lens = [1] * len(kv_lens)
    case, a = make_seed_case(q_lens, kv_lens, mla=mla, seed=3 + page_size, page_size=page_size)
    window = (-1, -1) if mla else (40, 0)
    softcap = 0.0 if mla else 50.0
    kw = dict(mla=mla, window=window, softcap=softcap)
    res = compare_with_oracle(lambda: seed_style_call(a, case, "cuda", **kw),
                              lambda: seed_style_call(a, case, "cpu", reference=True, **kw))
    ref_out, ref_lse = numpy_reference(case, a, **kw)
    assert_close(res[0], ref_out, "bfloat16")
    assert_lse_close(res[1], ref_lse)


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize(
    "mla,q_lens,kv_lens",
    [
        (False, [5, 1, 0, 17], [40, 16, 8, 17]),
        (True, [5, 1, 0, 16], [40, 16, 8, 17]),  # TARGET_VERIFY-sized MLA (<= 16 queries)
        (True, [5, 1, 0, 17], [40, 16, 8, 17]),  # MLA extend with more than 16 queries
    ],
    ids=["mha", "mla-verify", "mla-extend-long"],
)
def test_cuda_seed_extend(mla, q_lens, kv_lens):
    """forward_extend: several query tokens per request over a cached prefix (and one request
    with no query tokens)."""
    case, a = make_seed_case(q_lens, kv_lens, mla=mla, seed=7)
    kw = dict(mla=mla, window=(-1, -1) if mla else (24, 0), softcap=0.0 if mla else 20.0)
    compare_with_oracle(lambda: seed_style_call(a, case, "cuda", **kw),
                        lambda: seed_style_call(a, case, "cpu", reference=True, **kw))


@cuda
@pytest.mark.cuda
def test_cuda_bf16_cache_append_kv():
    """FA3's k=/v=: new keys written into a bf16 paged cache at cache_seqlens, then attended."""
    case = PagedCase([2, 1, 3], [5, 16, 0], append=[2, 1, 3], heads=8, heads_kv=2, head_dim=128,
                     page_size=16, seed=9)
    a = case.build()

    def call(device, reference=False):
        kc = t(a["k_cache"], device, torch.bfloat16)
        vc = t(a["v_cache"], device, torch.bfloat16)
        res = flashback.flash_attn_with_kvcache(
            t(a["q"], device, torch.bfloat16), kc, vc, k=t(a["k_new"], device, torch.bfloat16),
            v=t(a["v_new"], device, torch.bfloat16), cache_seqlens=t(a["cache_seqlens"], device),
            page_table=t(a["page_table"], device), cu_seqlens_q=t(a["cu_seqlens_q"], device),
            cu_seqlens_k_new=t(a["cu_new"], device), max_seqlen_q=3, causal=True,
            return_softmax_lse=True, reference=reference)
        return res[0], res[1], kc, vc

    out, lse, kc, vc = call_or_skip(call, "cuda")
    ref_out, ref_lse, ref_kc, ref_vc = call("cpu", reference=True)
    assert_close(out, as_f64(ref_out), "bfloat16")
    assert_lse_close(lse, as_f64(ref_lse))
    # Written slots are bit-identical to the oracle's; the rest stays NaN (never written; NaN
    # payloads differ between CPU and GPU conversions, so compare NaN-ness there).
    for got, want in ((kc.cpu(), ref_kc), (vc.cpu(), ref_vc)):
        written = ~torch.isnan(want)
        assert torch.equal(torch.isnan(got), ~written)
        assert torch.equal(got[written].view(torch.int16), want[written].view(torch.int16))


@cuda
@pytest.mark.cuda
def test_cuda_varlen_func_192_128():
    rng = np.random.default_rng(10)
    q_lens, k_lens = [7, 0, 1, 33], [7, 5, 1, 64]
    q = rng.standard_normal((sum(q_lens), 8, 192)).astype(np.float32)
    k = rng.standard_normal((sum(k_lens), 8, 192)).astype(np.float32)
    v = rng.standard_normal((sum(k_lens), 8, 128)).astype(np.float32)
    cu_q = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(k_lens)]).astype(np.int32)

    def call(device, reference=False):
        return flashback.flash_attn_varlen_func(
            t(q, device, torch.bfloat16), t(k, device, torch.bfloat16), t(v, device, torch.bfloat16),
            t(cu_q, device), t(cu_k, device), max(q_lens), max(k_lens), causal=True,
            return_softmax_lse=True, reference=reference)

    compare_with_oracle(lambda: call("cuda"), lambda: call("cpu", True))


@cuda
@pytest.mark.cuda
def test_cuda_merge_state_and_fp8_kv_store():
    g = torch.Generator().manual_seed(11)
    va, vb = torch.randn(2, 9, 4, 128, generator=g).to(torch.bfloat16)
    sa, sb = torch.randn(2, 9, 4, generator=g) * 3
    sa[0, 0] = float("-inf")
    sb[1, 1] = float("inf")
    res = call_or_skip(flashback.merge_state, va.cuda(), sa.cuda(), vb.cuda(), sb.cuda())
    ref = flashback.merge_state(va, sa, vb, sb, reference=True)
    assert_close(res[0], as_f64(ref[0]), "bfloat16")
    assert_lse_close(res[1], as_f64(ref[1]))

    k = torch.randn(6, 1, 576, generator=g).to(torch.bfloat16)
    loc = torch.tensor([3, 0, 7, 1, 5, 2], dtype=torch.int64)
    cache = torch.zeros(8, 1, 576, dtype=torch.float8_e4m3fn)
    cache_gpu = cache.cuda()
    call_or_skip(flashback.kv_store, k.cuda(), None, loc.cuda(), cache_gpu, None, k_scale=0.5)
    flashback.kv_store(k, None, loc, cache, None, k_scale=0.5, reference=True)
    assert torch.equal(cache_gpu.cpu().view(torch.uint8), cache.view(torch.uint8))


@cuda
@pytest.mark.cuda
def test_cuda_runs_on_the_callers_stream_and_in_a_graph():
    """Work goes to torch's current stream: a call inside CUDA-graph capture (which fails on any
    other stream) replays with new inputs to the oracle's results."""
    case, a = make_seed_case([1] * 4, [9, 17, 1, 40], mla=False, seed=12)
    kw = dict(mla=False, window=(-1, -1), softcap=0.0)
    call_or_skip(seed_style_call, a, case, "cuda", **kw)  # warm-up (and the skip check)
    static = {n: t(a[n], "cuda") for n in ("page_table", "cache_seqlens", "cu_seqlens_q")}
    q = t(a["q"], "cuda", torch.bfloat16)
    kc = t(a["k_cache"], "cuda", torch.float8_e4m3fn)
    vc = t(a["v_cache"], "cuda", torch.float8_e4m3fn)
    kd = a["k_scale"].cuda().expand(4, case.heads_kv)
    vd = a["v_scale"].cuda().expand(4, case.heads_kv)

    def step():
        return flashback.flash_attn_with_kvcache(
            q, kc, vc, page_table=static["page_table"], cache_seqlens=static["cache_seqlens"],
            cu_seqlens_q=static["cu_seqlens_q"], max_seqlen_q=1, softmax_scale=a["scale"],
            causal=True, k_descale=kd, v_descale=vd, return_softmax_lse=True)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = step()
    # New contents in the same buffers, then replay.
    q.copy_(torch.randn_like(q, dtype=torch.float32).to(torch.bfloat16))
    # Lengths within each row's pages (0: an empty row, LSE -inf).
    static["cache_seqlens"].copy_(torch.tensor([5, 17, 0, 33], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    a2 = dict(a, q=q.float().cpu().numpy(), cache_seqlens=np.array([5, 17, 0, 33], np.int32))
    ref_out, ref_lse = seed_style_call(a2, case, "cpu", reference=True, **kw)
    assert_close(out, as_f64(ref_out), "bfloat16")
    assert_lse_close(lse, as_f64(ref_lse))


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("mla", [False, True], ids=["mha", "mla"])
def test_cuda_backend_decode_step(mla):
    """AttentionBackend with CUDA tensors (host copies of the index arrays for the plan): one
    DECODE step writes its K/V and attends, as the engine-style NumPy test checks on the CPU."""
    from test_backend_numpy import Engine

    # Head dims every CUDA build has (the NumPy engine's small defaults are CPU-only).
    eng = Engine(4, mla=mla, seed=21, dims=(576, 512) if mla else (128, 128))
    eng.prefill_cache([5, 16, 9])
    have = [h.shape[0] for h in eng.hist_k]
    seq = np.array([n + 1 for n in have], np.int32)
    loc = np.array([eng.req_to_token[eng.rows[i], have[i]] for i in range(3)], np.int32)
    q = eng.rng.standard_normal((3, eng.H, eng.D)).astype(np.float32)
    k = eng.rng.standard_normal((3, eng.Hk, eng.D)).astype(np.float32)
    v = None if mla else eng.rng.standard_normal((3, eng.Hk, eng.Dv)).astype(np.float32)
    bf = torch.bfloat16
    kc = t(eng.k_cache, "cuda", bf)
    vc = None if mla else t(eng.v_cache, "cuda", bf)
    batch = flashback.ForwardBatch(
        forward_mode=flashback.ForwardMode.DECODE, batch_size=3,
        req_to_token=t(eng.req_to_token, "cuda"), req_pool_indices=t(eng.rows, "cuda"),
        req_pool_indices_cpu=t(eng.rows, "cpu"), seq_lens=t(seq, "cuda"),
        seq_lens_cpu=t(seq, "cpu"), out_cache_loc=t(loc, "cuda"))
    backend = flashback.AttentionBackend(page_size=4)
    qb, kb = t(q, "cuda", bf), t(k, "cuda", bf)
    vb = None if mla else t(v, "cuda", bf)
    call_or_skip(backend.init_forward_metadata, batch)
    out, lse = call_or_skip(backend.forward, qb, kb, vb, eng.layer, batch, kc, vc, return_lse=True)
    torch.cuda.synchronize()
    for i in range(3):
        kh = np.concatenate([eng.hist_k[i], as_f64(kb[i : i + 1])])
        vh = kh[..., : eng.Dv] if mla else np.concatenate([eng.hist_v[i], as_f64(vb[i : i + 1])])
        # The cache rows read back are the bf16 values the kernels saw.
        kh[:-1] = as_f64(torch.from_numpy(eng.hist_k[i]).to(bf))
        if not mla:
            vh[:-1] = as_f64(torch.from_numpy(eng.hist_v[i]).to(bf))
        else:
            vh = kh[..., : eng.Dv]
        ref_o, ref_l = attention_ref(as_f64(qb[i : i + 1]), kh, vh, causal=True, scale=0.3)
        assert_close(out[i : i + 1], ref_o, "bfloat16")
        assert_lse_close(lse[i : i + 1], ref_l)
        page, off = eng.slot(i, have[i])
        assert torch.equal(kc[page, off].cpu(), kb[i].cpu())


@pytest.mark.cuda
def test_cupy_arrays_on_cuda():
    """CuPy arrays in, CuPy arrays out (through DLPack), on the CuPy current stream."""
    cp = pytest.importorskip("cupy")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    case = PagedCase([1, 1, 1], [5, 16, 33], heads=8, heads_kv=2, head_dim=128, page_size=16,
                     dtype="float16", seed=14)
    a = case.build()
    args = {n: cp.asarray(a[n]) for n in ("q", "k_cache", "v_cache", "page_table",
                                          "cache_seqlens", "cu_seqlens_q")}
    out, lse = call_or_skip(
        flashback.flash_attn_with_kvcache, args["q"], args["k_cache"], args["v_cache"],
        cache_seqlens=args["cache_seqlens"], page_table=args["page_table"],
        cu_seqlens_q=args["cu_seqlens_q"], max_seqlen_q=1, causal=True, return_softmax_lse=True)
    assert isinstance(out, cp.ndarray) and isinstance(lse, cp.ndarray)
    cp.cuda.get_current_stream().synchronize()
    ref_out, ref_lse = flashback.flash_attn_with_kvcache(
        a["q"], a["k_cache"], a["v_cache"], cache_seqlens=a["cache_seqlens"],
        page_table=a["page_table"], cu_seqlens_q=a["cu_seqlens_q"], max_seqlen_q=1, causal=True,
        return_softmax_lse=True, reference=True)
    assert_close(cp.asnumpy(out), ref_out.astype(np.float64), "float16")
    assert_lse_close(cp.asnumpy(lse), ref_lse.astype(np.float64))
