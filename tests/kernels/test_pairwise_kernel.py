import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.pairwise_kernel import lengthscale_grad_reference, pairwise_kernel
from kernels.pairwise_kernel.reference import pairwise_kernel_naive
from tests.kernels.kernel_testing import DEVICE, DTYPES, assert_verbose_allclose, tol

KINDS = ["rbf", "matern52"]


def make(n, m, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    Y = torch.randn(m, d, generator=g)
    ls = (0.5 + torch.rand(d, generator=g)) * max(1.0, d ** 0.5 / 2)
    return X.to(DEVICE, dtype), Y.to(DEVICE, dtype), ls.to(DEVICE)


def naive_ls_grad(X, Y, ls, kind, G):
    ls64 = ls.detach().cpu().double().requires_grad_()
    K = pairwise_kernel_naive(X.cpu(), Y.cpu(), ls64, kind)
    return torch.autograd.grad((K * G.cpu().double()).sum(), ls64)[0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n,m,d", [(1, 1, 1), (7, 123, 5), (64, 33, 130), (200, 7, 3)])
def test_reference_matches_naive_float64(kind, n, m, d):
    X, Y, ls = [t.cpu() for t in make(n, m, d, seed=n + d)]
    assert_verbose_allclose(pairwise_kernel(X, Y, ls, kind, backend="reference"),
                            pairwise_kernel_naive(X, Y, ls, kind), atol=2e-6, rtol=1e-5)
    G = torch.randn(n, m)
    assert_verbose_allclose(lengthscale_grad_reference(X, Y, ls, kind, G), naive_ls_grad(X, Y, ls, kind, G),
                            atol=1e-4, rtol=1e-4)


def test_identical_points_give_one_and_finite_gradients():
    X = torch.randn(5, 3, device=DEVICE)
    for kind in KINDS:
        for backend in ("reference", "triton"):
            ls = torch.ones(3, device=DEVICE, requires_grad=True)
            K = pairwise_kernel(X, X, ls, kind, backend=backend)
            assert_verbose_allclose(K.diagonal(), torch.ones(5), atol=1e-5, rtol=0)
            (g,) = torch.autograd.grad(K.sum(), ls)
            assert torch.isfinite(g).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n,m,d", [(1, 1, 1), (7, 123, 5), (64, 33, 130), (130, 70, 16)])
def test_triton_matches_reference_with_lengthscale_grad(dtype, kind, n, m, d):
    X, Y, ls = make(n, m, d, dtype, seed=m)
    ls = ls.requires_grad_()
    G = torch.randn(n, m, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    K_t = pairwise_kernel(X, Y, ls, kind, backend="triton")
    (g_t,) = torch.autograd.grad((K_t * G).sum(), ls)
    K_r = pairwise_kernel(X, Y, ls, kind, backend="reference")
    (g_r,) = torch.autograd.grad((K_r * G).sum(), ls)
    assert K_t.dtype == torch.float32 and K_t.shape == (n, m)
    assert_verbose_allclose(K_t, K_r, atol=tol(dtype, 20)["atol"], rtol=tol(dtype, 20)["rtol"])
    scale = g_r.abs().max().item() + 1e-12
    assert_verbose_allclose(g_t / scale, g_r / scale, **tol(dtype, 50), name="grad_lengthscales")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 90), m=st.integers(1, 90), d=st.integers(1, 70), kind=st.sampled_from(KINDS),
       seed=st.integers(0, 2**16))
def test_hypothesis_triton_vs_naive(n, m, d, kind, seed):
    X, Y, ls = make(n, m, d, seed=seed)
    ls = ls.requires_grad_()
    K = pairwise_kernel(X, Y, ls, kind, backend="triton")
    assert_verbose_allclose(K, pairwise_kernel_naive(X.cpu(), Y.cpu(), ls.detach().cpu(), kind), atol=2e-6,
                            rtol=1e-5)
    G = torch.randn(n, m, generator=torch.Generator().manual_seed(seed)).to(DEVICE)
    (g,) = torch.autograd.grad((K * G).sum(), ls)
    expected = naive_ls_grad(X, Y, ls, kind, G)
    scale = expected.abs().max().item() + 1e-12
    assert_verbose_allclose(g / scale, expected / scale, atol=1e-4, rtol=1e-4)


def test_auto_uses_reference_when_inputs_need_grad():
    X, Y, ls = make(4, 5, 3)
    X = X.requires_grad_()
    K = pairwise_kernel(X, Y, ls, "rbf")
    (gx,) = torch.autograd.grad(K.sum(), X)
    assert gx.shape == X.shape
    with pytest.raises(ValueError, match="X or Y"):
        pairwise_kernel(X, Y, ls, "rbf", backend="triton")


def test_bad_input():
    X, Y, ls = make(4, 5, 3)
    cases = [
        (lambda: pairwise_kernel(X, Y[:, :2], ls), "Y"),
        (lambda: pairwise_kernel(X, Y, ls[:2]), "lengthscales"),
        (lambda: pairwise_kernel(X, Y, -ls), "lengthscales"),
        (lambda: pairwise_kernel(X, Y, ls, "laplace"), "kind"),
        (lambda: pairwise_kernel(X.long(), Y, ls), "X"),
        (lambda: pairwise_kernel(X, Y.double(), ls), "Y"),
        (lambda: pairwise_kernel(X, Y, ls.to("meta")), "lengthscales"),
        (lambda: pairwise_kernel(X.T.contiguous().T, Y, ls, backend="triton"), "X"),
        (lambda: pairwise_kernel(X[:, :0], Y[:, :0], ls[:0]), "X"),
    ]
    for fn, name in cases:
        with pytest.raises(ValueError, match=name):
            fn()
