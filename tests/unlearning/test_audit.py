import torch

from services.unlearning import audit


def test_auc_values():
    a = torch.tensor([3.0, 4.0, 5.0])
    b = torch.tensor([0.0, 1.0, 2.0])
    assert audit.auc(a, b) == 1.0
    assert audit.auc(b, a) == 0.0
    assert audit.auc(a, a) == 0.5
    # one inversion out of 4 pairs, one tie
    assert audit.auc(torch.tensor([1.0, 3.0]), torch.tensor([2.0, 0.0])) == 0.75
    assert audit.auc(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0])) == 0.875


def test_loss_mia_detects_memorised_points():
    forget = (torch.arange(5.0), torch.zeros(5))
    heldout = (torch.arange(5.0) + 10, torch.zeros(5))
    loss = lambda X, y: X  # "members" have the lower losses
    assert audit.loss_mia_auc(loss, forget, heldout) == 1.0


def test_same_sample_threshold_is_biased_and_split_is_not():
    # Identical distributions: a threshold picked on the counted samples still reports something > 0 at
    # moderate sizes more often than the split audit, which should report ~0.
    g = torch.Generator().manual_seed(0)
    w = torch.randn(200, 8, generator=g, dtype=torch.float64)
    o = torch.randn(200, 8, generator=g, dtype=torch.float64)
    split = audit.split_epsilon_audit(w, o, delta=1e-5, claimed_epsilon=1.0)
    assert split.eps_lower <= 0.2 and not split.violated
    assert split.n_with == 100 and split.n_without == 100
