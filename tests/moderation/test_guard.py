import numpy as np
import pytest
import torch

from services.common.errors import InvalidArgument
from services.moderation.guard import (
    FEATURE_DIM,
    GuardModel,
    LinearHeads,
    Targets,
    frozen_linear_objective,
)
from services.moderation.metrics import average_precision, guard_metrics


def test_predict_proba_shapes_and_monotone_severity(guard, seed_rows):
    rows = seed_rows[:20]
    p = guard.predict_proba([r.text for r in rows], [r.role for r in rows])
    assert p["unsafe"].shape == (20,) and p["topics"].shape == (20, 11)
    assert p["severity_ge"].shape == (20, 11, 4) and p["severity"].shape == (20, 11)
    assert np.all(np.diff(p["severity_ge"], axis=-1) <= 0)
    assert np.array_equal(p["severity"], (p["severity_ge"] >= 0.5).sum(-1))
    assert ((p["unsafe"] >= 0) & (p["unsafe"] <= 1)).all()


def test_features_layout_and_role(guard):
    phi = guard.features(["same text", "same text"], ["prompt", "response"])
    assert phi.shape == (2, FEATURE_DIM) and phi.dtype == np.float64
    e = phi[0, :384]
    assert np.allclose(np.linalg.norm(e), 1.0, atol=1e-5)
    assert np.array_equal(phi[1, :384], e) and np.array_equal(phi[1, 384:768], e) and phi[1, 768] == 1.0
    assert not phi[0, 384:].any()
    with pytest.raises(InvalidArgument) as ex:
        guard.features(["a"], ["assistant"])
    assert ex.value.violations[0].field == "roles[0]"


def test_validation_quality_on_seed_split(guard, seed_rows, seed_features):
    """Held-out scenarios of the seed set. Floors sit below what was observed (unsafe F1 0.85, AUPRC ~0.9)."""
    va = np.array([r.split == "validation" for r in seed_rows])
    m = guard_metrics(guard.predict_from_features(seed_features[va]),
                      Targets.from_examples([r for r in seed_rows if r.split == "validation"]))
    assert m["unsafe_f1"] > 0.7
    assert m["unsafe_auprc"] > 0.75
    assert m["severity_within_one"] > 0.6


def test_newton_reaches_the_documented_objective_minimum(guard, seed_rows, seed_features):
    """The unlearning contract: the heads are the minimiser of frozen_linear_objective (gradient ~ 0)."""
    tr = np.array([r.split == "train" for r in seed_rows])
    y = Targets.from_examples([r for r in seed_rows if r.split == "train"])
    h = guard.heads.clone()
    params = [getattr(h, k).requires_grad_(True) for k in LinearHeads.NAMES]
    J = frozen_linear_objective(h, torch.from_numpy(seed_features[tr]), y, guard.config["l2"])
    grads = torch.autograd.grad(J, params)
    assert max(float(g.abs().max()) for g in grads) < 1e-6
    # and it is a minimum: a perturbation increases J
    h2 = guard.heads.clone()
    h2.topic_w += 1e-2
    J2 = frozen_linear_objective(h2, torch.from_numpy(seed_features[tr]), y, guard.config["l2"])
    assert float(J2) > float(J.detach())


def test_registry_roundtrip_is_exact(guard, encoder, seed_rows):
    tensors, config = guard.to_registry()
    again = GuardModel.from_registry(tensors, config, base=encoder)
    assert again.fingerprint() == guard.fingerprint()
    texts, roles = [r.text for r in seed_rows[:5]], [r.role for r in seed_rows[:5]]
    a, b = guard.predict_proba(texts, roles), again.predict_proba(texts, roles)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    lh = guard.linear_heads()
    assert lh["topics"]["weight"].shape == (11, FEATURE_DIM) and lh["severity"]["bias"].shape == (11, 4)
    assert float(lh["l2"]["value"]) == config["l2"]


def test_predictions_do_not_depend_on_batch(guard, seed_rows):
    texts, roles = [r.text for r in seed_rows[:12]], [r.role for r in seed_rows[:12]]
    together = guard.predict_proba(texts, roles)
    guard.encoder.clear_cache()
    alone = [guard.predict_proba([t], [r]) for t, r in zip(texts, roles, strict=False)]
    for k in together:
        assert np.array_equal(together[k], np.concatenate([a[k] for a in alone]))


def test_average_precision_matches_definition():
    s = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    y = np.array([1, 0, 1, 0, 1])
    # precision at each positive: 1/1, 2/3, 3/5 -> mean
    assert average_precision(s, y) == pytest.approx((1 + 2 / 3 + 3 / 5) / 3)
    assert average_precision(np.array([0.5, 0.5]), np.array([1, 0])) == pytest.approx(0.5)
