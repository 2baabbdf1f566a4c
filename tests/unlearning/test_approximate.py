"""Uncertified methods on a small non-convex model."""
import torch

from services.unlearning import approximate, audit

from .helpers import blob_split, forget_indices, masks


def _mlp_setup():
    (X, y), (Xe, ye) = blob_split(800, 10, 3, n_eval=400)
    X, Xe = X.float() * 3, Xe.float() * 3
    model = approximate.MLPClassifier(10, [32], 3)
    torch.manual_seed(0)
    approximate.sgd(model, torch.nn.functional.cross_entropy, X, y, steps=300, lr=0.5, batch_size=64, seed=0)
    return model, X, y, Xe, ye


def test_methods_run_count_costs_and_label_uncertified():
    model, X, y, Xe, ye = _mlp_setup()
    acc0 = approximate.accuracy(model, Xe, ye)
    assert acc0 > 0.6
    keep, forget = masks(X.shape[0], forget_indices(X.shape[0], 40))
    loss = torch.nn.functional.cross_entropy
    per = approximate.per_example_loss_fn(model, loss)
    forget_loss_0 = float(per(X[forget], y[forget]).mean())
    results = {}
    for method in approximate.METHODS:
        m = approximate.MLPClassifier(10, [32], 3)
        m.load_state_dict(model.state_dict())
        res = approximate.unlearn_approximate(method, m, loss, retain=(X[keep], y[keep]), forget=(X[forget], y[forget]),
                                              steps=60, lr=0.2, batch_size=32, seed=1, noise_std=1e-3)
        assert res.certified is False and res.steps == 60 and res.grad_evals == 60 * 32
        results[method] = (m, res)
    # gradient ascent raises the loss on the forget set
    ga = results["gradient_ascent"][0]
    assert float(approximate.per_example_loss_fn(ga, loss)(X[forget], y[forget]).mean()) > forget_loss_0
    # fine-tuning variants keep utility
    for method in ("noisy_finetune", "finetune"):
        assert approximate.accuracy(results[method][0], Xe, ye) > acc0 - 0.05
    # parameters actually changed, and noisy differs from plain fine-tuning
    a = torch.cat([p.flatten() for p in results["noisy_finetune"][0].parameters()])
    b = torch.cat([p.flatten() for p in results["finetune"][0].parameters()])
    assert not torch.equal(a, b)
    # MIA audit runs on the result
    auc = audit.loss_mia_auc(approximate.per_example_loss_fn(results["retrain"][0], loss), (X[forget], y[forget]),
                             (Xe, ye))
    assert 0.0 <= auc <= 1.0


def test_sgd_resume_is_exact():
    model, X, y, _, _ = _mlp_setup()
    loss = torch.nn.functional.cross_entropy
    a = approximate.MLPClassifier(10, [32], 3)
    a.load_state_dict(model.state_dict())
    approximate.sgd(a, loss, X, y, steps=40, lr=0.1, batch_size=16, seed=3, noise_std=1e-3)
    b = approximate.MLPClassifier(10, [32], 3)
    b.load_state_dict(model.state_dict())
    saved = approximate.sgd(b, loss, X, y, steps=40, lr=0.1, batch_size=16, seed=3, noise_std=1e-3, max_iters=20)
    assert saved.step == 20 and saved.grad_evals == 20 * 16
    c = approximate.MLPClassifier(10, [32], 3)  # a fresh process: state comes from the checkpoint only
    approximate.sgd(c, loss, X, y, steps=40, lr=0.1, batch_size=16, seed=3, noise_std=1e-3,
                    state=approximate.SGDState.from_dict(saved.to_dict()))
    for pa, pc in zip(a.parameters(), c.parameters(), strict=True):
        torch.testing.assert_close(pa, pc)
