"""PreferDiff spec tests: the loss pieces, the sampler and the encoder."""
import math

import pytest
import torch
from torch.testing import assert_close

from kernels.preferdiff_loss import preferdiff_loss
from services.recommendation.model import (CrossEntropyRecommender, ModelConfig, PreferDiff, centroid_negatives,
                                           cos_err, ddim_sample, ddim_timesteps, guided_x0, linear_alphas_cumprod)


def small_model(lam=0.4, **kw) -> PreferDiff:
    torch.manual_seed(0)
    return PreferDiff(ModelConfig(kind="preferdiff", n_items=30, dim=16, max_history=6, lam=lam, **kw))


def batch(b=8, L=6, n_items=30, seed=1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, L + 1, (b,), generator=g)
    hist = torch.randint(1, n_items + 1, (b, L), generator=g)
    hist = torch.where(torch.arange(L)[None] < lengths[:, None], hist, torch.zeros_like(hist))
    target = torch.randint(1, n_items + 1, (b,), generator=g)
    return hist, lengths, target


def test_cos_err_is_zero_for_parallel_vectors_and_four_for_opposite():
    a = torch.randn(5, 7)
    assert_close(cos_err(a, 3.5 * a), torch.tensor(0.0), atol=1e-6, rtol=0)
    assert_close(cos_err(a, -a), torch.tensor(4.0))
    # mean over rows of (cos - 1)^2: orthogonal rows give exactly 1
    e = torch.eye(4)
    assert_close(cos_err(e, e.roll(1, dims=0)), torch.tensor(1.0))


def test_centroid_is_the_mean_of_the_other_targets():
    x = torch.randn(6, 4, dtype=torch.float64)
    c = centroid_negatives(x)
    for b in range(6):
        others = torch.cat([x[:b], x[b + 1:]])
        assert_close(c[b], others.mean(0))
    with pytest.raises(ValueError):
        centroid_negatives(x[:1])


def test_loss_matches_the_formula_with_pinned_draws():
    m = small_model(lam=0.4, gamma=5.0)
    hist, lengths, target = batch()
    b = target.shape[0]
    t = torch.randint(0, 2000, (b,))
    n_pos, n_neg = torch.randn(b, 16), torch.randn(b, 16)
    mask = torch.zeros(b, dtype=torch.bool)
    mask[2] = True
    m.eval()  # no dropout, so the hand computation sees the same h
    loss, parts = m.loss(hist, lengths, target, t=t, noise_pos=n_pos, noise_neg=n_neg, null_mask=mask)
    h = m.encoder(hist, lengths)
    h[2] = m.null
    e_pos = m.encoder.item_emb(target)
    e_bar = torch.stack([torch.cat([e_pos[:i], e_pos[i + 1:]]).mean(0) for i in range(b)])
    a = m.alphas_cumprod[t][:, None]
    pred_pos = m.denoise(a.sqrt() * e_pos + (1 - a).sqrt() * n_pos, h, t)
    pred_neg = m.denoise(a.sqrt() * e_bar + (1 - a).sqrt() * n_neg, h, t)
    l_pos = ((torch.nn.functional.cosine_similarity(e_pos, pred_pos, dim=-1) - 1) ** 2).mean()
    l_neg = ((torch.nn.functional.cosine_similarity(e_bar, pred_neg, dim=-1) - 1) ** 2).mean()
    want = -(0.6) * torch.log(torch.sigmoid(-5.0 * (l_pos - l_neg))) + 0.4 * l_pos
    assert_close(loss, want, rtol=1e-5, atol=1e-6)
    assert parts["l_pos"] == pytest.approx(float(l_pos.detach()), rel=1e-5)
    assert parts["l_neg"] == pytest.approx(float(l_neg.detach()), rel=1e-5)


def test_equal_positive_and_negative_with_shared_noise_make_the_preference_term_constant():
    """With e- = e+ and the same noise and t, L_pos == L_neg identically, so the preference term equals
    (1 - lam) * log 2 whatever the parameters and contributes zero gradient; lam = 0 leaves a loss of exactly log 2
    with all-zero gradients, lam > 0 leaves (1 - lam) log 2 + lam * L_pos. Seeded draws; the zero-gradient check
    allows an absolute 1e-6 of float32 rounding where the two paths' gradients cancel (the largest element over
    seeds 11-30 was 2.7e-7; a 1.4e-7 element once failed an absolute 1e-7)."""
    hist, lengths, target = batch(b=10)
    g = torch.Generator().manual_seed(11)
    t = torch.randint(0, 2000, (10,), generator=g)
    noise = torch.randn(10, 16, generator=g)
    for lam in (0.0, 0.4):
        m = small_model(lam=lam)
        m.eval()
        x0 = m.encoder.item_emb(target)
        loss, parts = m.loss(hist, lengths, target, t=t, noise_pos=noise, noise_neg=noise,
                             null_mask=torch.zeros(10, dtype=torch.bool), x0_neg=x0)
        assert parts["l_pos"] == parts["l_neg"]
        assert_close(loss, torch.tensor((1 - lam) * math.log(2.0) + lam * parts["l_pos"]), rtol=1e-6, atol=1e-7)
        if lam == 0.0:
            loss.backward()
            grads = [p.grad for p in m.parameters() if p.grad is not None]
            assert grads, "the loss must reach the parameters"
            for gr in grads:
                assert_close(gr, torch.zeros_like(gr), atol=1e-6, rtol=0)


def test_preference_term_prefers_a_smaller_positive_error():
    """The model's loss is the kernel's formula (one formula): a positive closer to its target than the negative
    gives a loss below log 2 at lam = 0; lam = 1 leaves L_pos alone."""
    g = torch.Generator().manual_seed(2)
    target = torch.randn(6, 8, generator=g)
    close = target + 0.1 * torch.randn(6, 8, generator=g)
    far = torch.randn(6, 8, generator=g)
    good = preferdiff_loss(close, target, far, target, lam=0.0, gamma=5.0)
    bad = preferdiff_loss(far, target, close, target, lam=0.0, gamma=5.0)
    assert good < math.log(2) < bad
    assert_close(preferdiff_loss(close, target, far, target, lam=1.0, gamma=5.0), cos_err(target, close))


def test_dreamrec_is_the_mse_objective_without_negatives():
    torch.manual_seed(0)
    m = PreferDiff(ModelConfig(kind="dreamrec", n_items=30, dim=16, max_history=6, lam=1.0, loss_type="mse"))
    m.eval()
    hist, lengths, target = batch()
    g = torch.Generator().manual_seed(4)
    t = torch.randint(0, 2000, (8,), generator=g)
    noise = torch.randn(8, 16, generator=g)
    mask = torch.zeros(8, dtype=torch.bool)
    loss, parts = m.loss(hist, lengths, target, t=t, noise_pos=noise, null_mask=mask)
    x0 = m.encoder.item_emb(target)
    pred = m.denoise(m.q_sample(x0, t, noise), m.encoder(hist, lengths), t)
    assert_close(loss, torch.nn.functional.mse_loss(pred, x0))
    assert "l_neg" not in parts


def test_linear_schedule_and_ddim_steps():
    a = linear_alphas_cumprod(2000, 1e-4, 0.02)
    assert a.shape == (2000,)
    assert_close(a[0], torch.tensor(1 - 1e-4))
    assert bool((a[1:] < a[:-1]).all()) and float(a[-1]) < 1e-4
    # As the reference (ddim_step = T / 20): 20 strides 1999, 1899, ..., 99, then a last x0-prediction at t = 0.
    ts = ddim_timesteps(2000, 20)
    assert len(ts) == 21 and ts[0] == 1999 and ts[-2] == 99 and ts[-1] == 0 and ts == sorted(ts, reverse=True)
    assert ddim_timesteps(10, 10) == list(range(9, -1, -1))  # no duplicate t = 0 when every step is visited


def test_ddim_with_an_oracle_x0_predictor_returns_x0():
    a = linear_alphas_cumprod(2000, 1e-4, 0.02)
    x0 = torch.randn(4, 8)
    seen = []

    def oracle(x, t):
        seen.append((x.clone(), int(t[0])))
        return x0

    out = ddim_sample(oracle, (4, 8), a, 20, generator=torch.Generator().manual_seed(3))
    assert_close(out, x0, rtol=1e-5, atol=1e-5)
    # The deterministic trajectory stays on sqrt(a_t) x0 + sqrt(1 - a_t) eps_T for the starting noise eps_T.
    eps = (seen[0][0] - a[seen[0][1]].sqrt() * x0) / (1 - a[seen[0][1]]).sqrt()
    for x, t in seen[1:]:
        assert_close(x, a[t].sqrt() * x0 + (1 - a[t]).sqrt() * eps, rtol=1e-4, atol=1e-4)


def test_guidance_zero_is_plain_conditional_sampling():
    m = small_model()
    m.eval()
    with torch.no_grad():
        m.null.fill_(1e3)  # a null condition that would change everything if it leaked in
    hist, lengths, _ = batch()
    h = m.encoder(hist, lengths)
    got = m.sample(h, w=0.0, generator=torch.Generator().manual_seed(5))
    want = ddim_sample(lambda x, t: m.denoise(x, h, t), tuple(h.shape), m.alphas_cumprod, 20,
                       generator=torch.Generator().manual_seed(5))
    assert_close(got, want)
    guided = m.sample(h, w=2.0, generator=torch.Generator().manual_seed(5))
    assert not torch.allclose(guided, want)
    c, u = torch.randn(3, 4), torch.randn(3, 4)
    assert_close(guided_x0(c, u, 0.0), c)
    assert_close(guided_x0(c, u, 2.0), 3 * c - 2 * u)


def test_null_condition_cuts_the_history_encoder_off():
    m = small_model()
    hist, lengths, target = batch()
    loss, _ = m.loss(hist, lengths, target, null_mask=torch.ones(8, dtype=torch.bool))
    loss.backward()
    for name, p in m.encoder.named_parameters():
        if name != "item_emb.weight":  # item embeddings are also the diffusion targets
            assert p.grad is None or float(p.grad.abs().max()) == 0.0, name
    assert float(m.null.grad.abs().max()) > 0


@pytest.mark.parametrize("cls,kind", [(PreferDiff, "preferdiff"), (CrossEntropyRecommender, "sasrec_ce"),
                                      (CrossEntropyRecommender, "gru4rec")])
def test_encoder_ignores_right_padding_and_uses_the_last_item(cls, kind):
    torch.manual_seed(0)
    m = cls(ModelConfig(kind=kind, n_items=30, dim=16, max_history=6, inner=24))
    m.eval()
    short = torch.tensor([[4, 9, 17]])
    padded = torch.tensor([[4, 9, 17, 0, 0, 0]])
    h1 = m.encoder(short, torch.tensor([3]))
    h2 = m.encoder(padded, torch.tensor([3]))
    assert_close(h1, h2)
    h3 = m.encoder(torch.tensor([[4, 9, 18, 0, 0, 0]]), torch.tensor([3]))
    assert not torch.allclose(h2, h3)
