"""Out-of-distribution forget sets (the paper's regime: least squares, labels shifted by a fixed offset)."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.errors import InvalidArgument
from services.unlearning import certified, robust
from services.unlearning.linear import LinearProblem
from services.unlearning.synthetic import shift_labels

from .helpers import forget_indices, masks, regression_split

R = 1e-3


@settings(max_examples=30, deadline=None)
@given(n=st.integers(5, 40), p=st.integers(1, 4), data=st.data())
def test_trimmed_mean_ignores_up_to_trim_outliers(n, p, data):
    trim = data.draw(st.integers(0, (n - 1) // 2))
    g = torch.Generator().manual_seed(n * 31 + p)
    inliers = torch.rand(n, p, generator=g, dtype=torch.float64)
    tm = robust.trimmed_mean(inliers, trim)
    assert bool((tm >= inliers.min(0).values - 1e-12).all() and (tm <= inliers.max(0).values + 1e-12).all())
    if trim >= 1:
        # replace up to `trim` rows by huge outliers: the aggregate stays inside the inliers' range
        k = data.draw(st.integers(1, trim))
        corrupted = inliers.clone()
        corrupted[:k] = 1e9 * (2 * torch.rand(k, p, generator=g, dtype=torch.float64) - 1)
        tmc = robust.trimmed_mean(corrupted, trim)
        assert bool((tmc >= inliers.min(0).values - 1e-9).all() and (tmc <= inliers.max(0).values + 1e-9).all())
    if trim == 0:
        torch.testing.assert_close(tm, inliers.mean(0))


@pytest.fixture(scope="module")
def ood():
    X, y = regression_split(2000, 20)
    n, f = X.shape[0], 20                      # 1% of the data, labels shifted by +100
    p = LinearProblem("ridge_l2", 0.05, 20, 1)
    idx = forget_indices(n, f)
    keep, forget = masks(n, idx)
    yo = shift_labels(y, idx, num_classes=1, offset=100.0)
    kw = dict(radius=R, epsilon=1.0, delta=1e-5)
    trained = certified.train_certified(p, X, yo, **kw)
    un = certified.unlearn_certified(p, X[keep], yo[keep], trained.theta_private, **kw)
    re = certified.retrain_certified(p, X[keep], yo[keep], **kw)
    rob = robust.robust_train(p, X, yo, trim=robust.trim_count(n, f), seed=0, noise_std=1e-3, max_steps=400)
    un_rob = certified.unlearn_certified(p, X[keep], yo[keep], rob.theta, **kw)
    # in-distribution control: same data without the shift
    trained_id = certified.train_certified(p, X, y, **kw)
    un_id = certified.unlearn_certified(p, X[keep], y[keep], trained_id.theta_private, **kw)
    re_id = certified.retrain_certified(p, X[keep], y[keep], **kw)
    return dict(p=p, X=X, yo=yo, keep=keep, trained=trained, un=un, re=re, rob=rob, un_rob=un_rob, un_id=un_id,
                re_id=re_id)


def test_ood_forget_set_costs_more_than_retraining_without_robust_training(ood):
    assert ood["un"].certificate.grad_evals > ood["re"].certificate.grad_evals
    # while the same request in-distribution is cheaper than retraining
    assert ood["un_id"].certificate.grad_evals < ood["re_id"].certificate.grad_evals


def test_robust_training_makes_ood_unlearning_cheaper_than_retraining(ood):
    assert ood["un_rob"].certificate.grad_evals < ood["re"].certificate.grad_evals
    assert ood["un_rob"].certificate.grad_evals < ood["un"].certificate.grad_evals
    # and the certificate is the same kind: within r of the retain minimizer
    p, X, yo, keep = ood["p"], ood["X"], ood["yo"], ood["keep"]
    star = certified.gd_to_radius(p, X[keep], yo[keep], ood["re"].theta_private, 1e-9, max_steps=50_000)
    assert float((ood["un_rob"].theta_private - star.theta).norm()) <= R


def test_regime_classification(ood):
    p, X, yo, keep = ood["p"], ood["X"], ood["yo"], ood["keep"]
    plain = robust.classify_request(p, X[keep], yo[keep], ood["trained"].theta_private, radius=R)
    assert plain.regime == "out_of_distribution"
    assert plain.grad_norm_warm > plain.grad_norm_zero
    rob = robust.classify_request(p, X[keep], yo[keep], ood["rob"].theta, radius=R)
    assert rob.regime == "in_distribution"
    assert rob.grad_evals == 2 * int(keep.sum())


def test_trim_count_validation():
    assert robust.trim_count(100, 3) == 3
    assert robust.trim_count(100, 3, trim_fraction=0.1) == 10
    with pytest.raises(InvalidArgument):
        robust.trim_count(10, 5)
