import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.preferdiff_loss import preferdiff_loss
from kernels.preferdiff_loss.reference import cos_err, preferdiff_loss_naive
from tests.kernels.kernel_testing import DEVICE, DTYPES, assert_verbose_allclose, tol


def make(B, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, d, generator=g).to(DEVICE, dtype).requires_grad_() for _ in range(4)]


@pytest.mark.parametrize("B,d", [(1, 1), (7, 33), (64, 128), (130, 300)])
@pytest.mark.parametrize("lam,gamma", [(0.4, 5.0), (1.0, 5.0), (0.0, 1.0)])
def test_reference_matches_naive_float64(B, d, lam, gamma):
    xs = [x.detach().cpu() for x in make(B, d, seed=B)]
    got = preferdiff_loss(*xs, lam, gamma, backend="reference")
    assert math.isclose(got.item(), preferdiff_loss_naive(*xs, lam, gamma).item(), rel_tol=1e-5, abs_tol=1e-6)


def test_reference_matches_official_formula_structure():
    # the mean over the batch is taken inside each cos_err, the logsigmoid acts on the two scalars
    pp, tp, pn, tn = [x.detach().cpu() for x in make(9, 5, seed=3)]
    l_pos = ((torch.nn.functional.cosine_similarity(tp, pp) - 1) ** 2).mean()
    l_neg = ((torch.nn.functional.cosine_similarity(tn, pn) - 1) ** 2).mean()
    expected = -(0.6) * torch.nn.functional.logsigmoid(-5.0 * (l_pos - l_neg)) + 0.4 * l_pos
    loss, lp, ln = preferdiff_loss(pp, tp, pn, tn, 0.4, 5.0, return_terms=True, backend="reference")
    assert_verbose_allclose(torch.stack([loss, lp, ln]), torch.stack([expected, l_pos, l_neg]), atol=1e-6, rtol=1e-6)


def test_parallel_vectors_have_zero_cos_err_and_constant_preference_term():
    a = torch.randn(6, 8)
    assert cos_err(a, 3.0 * a).item() == pytest.approx(0.0, abs=1e-6)
    pp, tp, _, _ = [x.detach() for x in make(6, 8, seed=5)]
    # negatives equal to the positives: preference term = -(1-lam) log sigmoid(0) whatever the predictions
    for backend in ("reference", "triton"):
        loss, lp, _ = preferdiff_loss(pp, tp, pp, tp, 0.4, 5.0, return_terms=True, backend=backend)
        assert loss.item() == pytest.approx(0.6 * math.log(2) + 0.4 * lp.item(), rel=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,d", [(1, 1), (7, 33), (64, 128), (130, 300), (5, 1000)])
def test_triton_forward_and_backward_match_reference(dtype, B, d):
    xs = make(B, d, dtype, seed=d)
    xs[1].data[0] = 0.0  # a zero target row: cos 0, finite gradients
    loss_t, lp_t, ln_t = preferdiff_loss(*xs, 0.4, 5.0, return_terms=True, backend="triton")
    g_t = torch.autograd.grad(loss_t, xs)
    loss_r, lp_r, ln_r = preferdiff_loss(*xs, 0.4, 5.0, return_terms=True, backend="reference")
    g_r = torch.autograd.grad(loss_r, xs)
    assert loss_t.dtype == torch.float32 and loss_t.dim() == 0
    assert_verbose_allclose(torch.stack([loss_t, lp_t, ln_t]), torch.stack([loss_r, lp_r, ln_r]), **tol(dtype, 10))
    for name, a, b in zip(("pred_pos", "target_pos", "pred_neg", "target_neg"), g_t, g_r, strict=True):
        assert a.dtype == dtype
        scale = b.float().abs().max().item() + 1e-12
        assert_verbose_allclose(a.float() / scale, b.float() / scale, **tol(dtype, 10), name=name)


def test_triton_gradients_through_terms():
    xs = make(11, 17, seed=8)
    _, lp, ln = preferdiff_loss(*xs, 0.4, 5.0, return_terms=True, backend="triton")
    g_t = torch.autograd.grad(2 * lp - ln, xs)
    _, lp, ln = preferdiff_loss(*xs, 0.4, 5.0, return_terms=True, backend="reference")
    g_r = torch.autograd.grad(2 * lp - ln, xs)
    for a, b in zip(g_t, g_r, strict=True):
        assert_verbose_allclose(a, b, atol=1e-6, rtol=1e-5)


def test_reference_gradcheck_float64_formula():
    xs = [x.detach().cpu().double().requires_grad_() for x in make(4, 3, seed=2)]
    assert torch.autograd.gradcheck(lambda *a: preferdiff_loss_naive(*a, 0.4, 5.0), xs)
    g_naive = torch.autograd.grad(preferdiff_loss_naive(*xs, 0.4, 5.0), xs)
    xf = [x.detach().float().requires_grad_() for x in xs]
    g_tr = torch.autograd.grad(preferdiff_loss(*[x.to(DEVICE) for x in xf], 0.4, 5.0, backend="triton"), xf)
    for a, b in zip(g_tr, g_naive, strict=True):
        assert_verbose_allclose(a, b, atol=1e-6, rtol=1e-4)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(B=st.integers(1, 70), d=st.integers(1, 300), lam=st.floats(0, 1), gamma=st.floats(0.1, 10),
       seed=st.integers(0, 2**16))
def test_hypothesis_triton_vs_reference(B, d, lam, gamma, seed):
    xs = make(B, d, seed=seed)
    lt = preferdiff_loss(*xs, lam, gamma, backend="triton")
    gt = torch.autograd.grad(lt, xs)
    lr = preferdiff_loss(*xs, lam, gamma, backend="reference")
    gr = torch.autograd.grad(lr, xs)
    assert lt.item() == pytest.approx(lr.item(), rel=1e-5, abs=1e-6)
    # dcos/da = b/(|a||b|) - cos a/|a|^2 cancels (exactly, for d = 1): absolute error scales with the largest gradient
    scale = max(1.0, max(b.abs().max().item() for b in gr))
    for a, b in zip(gt, gr, strict=True):
        assert_verbose_allclose(a, b, atol=1e-5 * scale, rtol=1e-4)


def test_bad_input():
    pp, tp, pn, tn = [x.detach() for x in make(4, 6)]
    cases = [
        (lambda: preferdiff_loss(pp, tp[:, :5], pn, tn), "target_pos"),
        (lambda: preferdiff_loss(pp, tp, pn[:3], tn), "pred_neg"),
        (lambda: preferdiff_loss(pp, tp, pn, tn.double()), "target_neg"),
        (lambda: preferdiff_loss(pp, tp.half(), pn, tn), "target_pos"),
        (lambda: preferdiff_loss(pp.long(), tp, pn, tn), "pred_pos"),
        (lambda: preferdiff_loss(pp, tp, pn, tn, lam=1.5), "lam"),
        (lambda: preferdiff_loss(pp, tp, pn, tn, gamma=float("inf")), "gamma"),
        (lambda: preferdiff_loss(pp, tp, pn, tn.to("meta")), "target_neg"),
        (lambda: preferdiff_loss(pp[:0], tp[:0], pn[:0], tn[:0]), "pred_pos"),
        (lambda: preferdiff_loss(pp.T.contiguous().T, tp, pn, tn, backend="triton"), "pred_pos"),
        (lambda: preferdiff_loss(pp, tp, pn, tn, backend="gpu"), "backend"),
    ]
    for fn, name in cases:
        with pytest.raises(ValueError, match=name):
            fn()
