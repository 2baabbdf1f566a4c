import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.kv_cache import kv_budget, kv_budget_qk, kv_compress, layer_budgets
from kernels.kv_cache.reference import qk_tail_stats_reference, tail_stats_reference
from tests.kernels.kernel_testing import DEVICE, DTYPES, assert_verbose_allclose, tol


def tail_attention(L, H, tau, m, seed=0, temp=3.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(L, H, tau, m, generator=g) * temp * torch.linspace(0.3, 2.0, L)[:, None, None, None]
    causal = torch.arange(m)[None, :] <= torch.arange(m - tau, m)[:, None]
    return torch.softmax(logits.masked_fill(~causal, float("-inf")), -1).to(DEVICE, dtype)


def naive_stats(a, p):
    a = a.double().cpu()
    kept = (a >= p * a.amax(-1, keepdim=True)).double()
    return a.sum(2), kept.mean(dim=(1, 2, 3))


# ---- statistics -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("L,H,tau,m", [(1, 1, 1, 1), (2, 3, 5, 7), (3, 4, 8, 123), (2, 2, 33, 600)])
def test_reference_stats_match_naive(L, H, tau, m):
    a = tail_attention(L, H, tau, m, seed=m).cpu()
    s, d = tail_stats_reference(a, 0.01)
    s64, d64 = naive_stats(a, 0.01)
    assert_verbose_allclose(s, s64, atol=1e-6, rtol=1e-6)
    assert_verbose_allclose(d, d64, atol=1e-7, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L,H,tau,m", [(1, 1, 1, 1), (2, 3, 5, 7), (3, 4, 8, 123), (2, 2, 33, 600)])
def test_triton_attn_stats_match_reference(dtype, L, H, tau, m):
    a = tail_attention(L, H, tau, m, seed=m, dtype=dtype)
    a_view = a.transpose(2, 3).contiguous().transpose(2, 3)  # strided input is accepted
    bt = kv_budget(a_view, 0.3, backend="triton")
    br = kv_budget(a, 0.3, backend="reference")
    assert_verbose_allclose(bt.scores, br.scores, atol=1e-5, rtol=1e-5)
    assert torch.equal(bt.density.cpu(), br.density.cpu())
    assert torch.equal(bt.budgets.cpu(), br.budgets.cpu())


def make_qk(L, H, Hkv, tau, m, D, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(L, H, tau, D, generator=g) * 2
    k = torch.randn(L, Hkv, m, D, generator=g)
    return q.to(DEVICE, dtype), k.to(DEVICE, dtype)


@pytest.mark.parametrize("L,H,Hkv,tau,m,D", [(1, 1, 1, 1, 1, 8), (2, 4, 2, 5, 123, 16), (2, 2, 2, 20, 300, 64),
                                             (1, 3, 1, 7, 70, 5)])
def test_reference_qk_stats_match_float64_softmax(L, H, Hkv, tau, m, D):
    q, k = [t.cpu() for t in make_qk(L, H, Hkv, tau, m, D, seed=m)]
    s, d = qk_tail_stats_reference(q, k, 0.01)
    kk = k.double().repeat_interleave(H // Hkv, dim=1)
    logits = torch.einsum("lhtd,lhmd->lhtm", q.double(), kk) / math.sqrt(D)
    causal = torch.arange(m)[None, :] <= torch.arange(m - tau, m)[:, None]
    a = torch.softmax(logits.masked_fill(~causal, float("-inf")), -1)
    s64, d64 = naive_stats(a, 0.01)
    assert_verbose_allclose(s, s64, atol=1e-5, rtol=1e-5)
    assert_verbose_allclose(d, d64, atol=2.0 / (H * tau * m), rtol=0)  # boundary entries may flip in float32


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L,H,Hkv,tau,m,D", [(1, 1, 1, 1, 1, 8), (2, 4, 2, 5, 123, 16), (2, 2, 2, 20, 300, 64),
                                             (1, 3, 1, 7, 70, 5)])
def test_triton_qk_stats_match_reference(dtype, L, H, Hkv, tau, m, D):
    q, k = make_qk(L, H, Hkv, tau, m, D, seed=m, dtype=dtype)
    bt = kv_budget_qk(q, k, 0.25, backend="triton")
    br = kv_budget_qk(q, k, 0.25, backend="reference")
    assert_verbose_allclose(bt.scores, br.scores, **tol(dtype, 20))
    assert_verbose_allclose(bt.density, br.density, atol=2.0 / (H * tau * m), rtol=0)


# ---- budgets --------------------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 40), m=st.integers(1, 5000), alpha=st.floats(0.01, 1.0), seed=st.integers(0, 2**16))
def test_budgets_sum_exactly_and_follow_density(L, m, alpha, seed):
    g = torch.Generator().manual_seed(seed)
    d = torch.rand(L, generator=g) * 0.9 + 0.05
    n = layer_budgets(d, alpha, m)
    assert n.dtype == torch.int64 and int(n.sum()) == math.floor(alpha * L * m + 0.5)
    assert (n >= 0).all() and (n <= m).all()
    order = torch.argsort(d)
    # denser layers never get fewer tokens (up to the one-token apportionment slack)
    assert (n[order][1:] >= n[order][:-1] - 1).all()


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 40), m=st.integers(1, 5000), alpha=st.floats(0.01, 1.0), seed=st.integers(0, 2**16))
def test_budgets_equal_vl_cache_formula_when_no_clip_binds(L, m, alpha, seed):
    g = torch.Generator().manual_seed(seed)
    d = torch.rand(L, generator=g) + 0.5
    beta = (d.double() / d.double().sum() * alpha * L)
    reals = beta.clamp(0.01, 1.0) * m
    literal = layer_budgets(d, alpha, m, redistribute=False)
    assert ((literal.double() - reals).abs() < 1).all()  # VL-Cache's clipped formula, always
    if bool(((beta > 0.01) & (beta < 1)).all()):  # no clip binds: both modes are the formula, sum exact
        for n in (literal, layer_budgets(d, alpha, m)):
            assert ((n.double() - reals).abs() < 1).all()
            assert int(n.sum()) == math.floor(alpha * L * m + 0.5)


def test_literal_mode_clips_and_redistribution_hands_budget_on():
    d = torch.tensor([1.0, 0.01, 0.01, 0.01])
    lit = layer_budgets(d, 0.5, 1000, redistribute=False)
    red = layer_budgets(d, 0.5, 1000)
    assert lit[0].item() == 1000 and int(lit.sum()) < 2000  # the dense layer's share is clipped away
    assert int(red.sum()) == 2000 and red[0].item() == 1000 and (red[1:] > lit[1:]).all()
    assert layer_budgets(d, 1.0, 1000).tolist() == [1000] * 4


# ---- compression ----------------------------------------------------------------------------------------------
def naive_positions(scores, budgets, window):
    L, H, m = scores.shape
    out = {}
    for layer in range(L):
        for h in range(H):
            b = int(budgets[layer])
            w = min(window, b)
            recent = list(range(m - w, m))
            older = sorted(range(m - w), key=lambda j: (-float(scores[layer, h, j]), j))[: b - w]
            out[layer, h] = sorted(older + recent)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L,H,m,D,window", [(1, 1, 1, 8, 0), (2, 3, 7, 16, 2), (3, 2, 123, 64, 8),
                                            (2, 2, 300, 5, 400)])
def test_compress_matches_naive_selection_on_both_backends(dtype, L, H, m, D, window):
    g = torch.Generator().manual_seed(m)
    k = torch.randn(L, H, m, D, generator=g).to(DEVICE, dtype)
    v = torch.randn(L, H, m, D + 3, generator=g).to(DEVICE, dtype)
    scores = torch.randint(0, 5, (L, H, m), generator=g).float().to(DEVICE)  # ties -> earlier position
    budgets = torch.randint(0, m + 1, (L,), generator=g).to(DEVICE)
    expected = naive_positions(scores.cpu(), budgets.cpu(), window)
    for backend in ("reference", "triton"):
        c = kv_compress(k, v, scores, budgets, window, backend=backend)
        assert c.k.shape == (L, H, int(budgets.max()), D) and c.v.dtype == dtype
        for (layer, h), pos in expected.items():
            n = len(pos)
            assert c.lengths[layer, h].item() == n
            assert c.positions[layer, h, :n].tolist() == pos
            assert c.positions[layer, h, n:].eq(-1).all()
            assert torch.equal(c.k[layer, h, :n], k[layer, h, pos]), backend
            assert torch.equal(c.v[layer, h, :n], v[layer, h, pos]), backend
            assert c.k[layer, h, n:].eq(0).all()


def test_alpha_one_returns_full_cache_exactly():
    L, H, tau, m, D = 3, 2, 6, 57, 16
    a = tail_attention(L, H, tau, m, seed=4)
    g = torch.Generator().manual_seed(0)
    k = torch.randn(L, H, m, D, generator=g).to(DEVICE)
    v = torch.randn(L, H, m, D, generator=g).to(DEVICE)
    for backend in ("reference", "triton"):
        b = kv_budget(a, 1.0, backend=backend)
        assert b.budgets.tolist() == [m] * L
        assert len(set(b.density.tolist())) > 1  # densities differ, yet nothing is dropped
        c = kv_compress(k, v, b.scores, b.budgets, window=4, backend=backend)
        assert torch.equal(c.k, k) and torch.equal(c.v, v)
        assert c.positions.eq(torch.arange(m, device=DEVICE)).all()


def test_denser_layers_get_larger_budgets_end_to_end():
    a = tail_attention(4, 2, 8, 400, seed=1)  # temperature rises with the layer: later layers sparser
    b = kv_budget(a, 0.2)
    assert (b.density[:-1] > b.density[1:]).all()
    assert (b.budgets[:-1] >= b.budgets[1:]).all()
    assert int(b.budgets.sum()) == math.floor(0.2 * 4 * 400 + 0.5)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(L=st.integers(1, 3), H=st.integers(1, 3), tau=st.integers(1, 12), extra=st.integers(0, 150),
       alpha=st.floats(0.01, 1.0), p=st.floats(0.001, 0.5), seed=st.integers(0, 2**16))
def test_hypothesis_triton_vs_reference_stats(L, H, tau, extra, alpha, p, seed):
    m = tau + extra
    a = tail_attention(L, H, tau, m, seed=seed)
    bt = kv_budget(a, alpha, p, backend="triton")
    br = kv_budget(a, alpha, p, backend="reference")
    assert_verbose_allclose(bt.scores, br.scores, atol=1e-5, rtol=1e-5)
    assert torch.equal(bt.budgets.cpu(), br.budgets.cpu())


def test_bad_input():
    a = tail_attention(2, 2, 3, 10)
    q, k = make_qk(2, 2, 2, 3, 10, 8)
    kc, vc = torch.randn(2, 2, 10, 4), torch.randn(2, 2, 10, 4)
    s, b = torch.rand(2, 2, 10), torch.tensor([3, 4])
    cases = [
        (lambda: kv_budget(a, 1.5), "alpha"),
        (lambda: kv_budget(a, 0.001), "alpha"),
        (lambda: kv_budget(a, 0.5, p=0.0), "p"),
        (lambda: kv_budget(a[0], 0.5), "attn_tail"),
        (lambda: kv_budget(a.long(), 0.5), "attn_tail"),
        (lambda: kv_budget_qk(q, k[..., :7], 0.5), "keys"),
        (lambda: kv_budget_qk(q, k[:, :, :2], 0.5), "tau"),
        (lambda: kv_budget_qk(q, k.half(), 0.5), "keys"),
        (lambda: kv_budget_qk(q, k.to("meta"), 0.5), "keys"),
        (lambda: kv_compress(kc, vc[:, :, :9], s, b, 2), "v"),
        (lambda: kv_compress(kc, vc, s[:, :, :9], b, 2), "scores"),
        (lambda: kv_compress(kc, vc, s, b + 10, 2), "budgets"),
        (lambda: kv_compress(kc, vc, s, b.float(), 2), "budgets"),
        (lambda: kv_compress(kc, vc, s, b, -1), "window"),
        (lambda: kv_compress(kc, vc, s * float("nan"), b, 2), "scores"),
        (lambda: kv_compress(kc.transpose(-1, -2).contiguous().transpose(-1, -2), vc, s, b, 2, backend="triton"),
         "k"),
    ]
    for fn, name in cases:
        with pytest.raises(ValueError, match=name):
            fn()
