"""FLAT's losses against hand computations (every f-divergence of the paper's code), gradient ascent and NPO against
hand computations, the batched probability path against an unbatched one, and on a tiny Llama fine-tuned on
fictitious authors: FLAT lowers the forget answers' probability and raises the template answers'; a resumed trainer
continues bit for bit."""
from __future__ import annotations

import functools
import math

import pytest
import torch

from services.unlearning import authors as A
from services.unlearning import flat as F
from services.unlearning import llm_eval as E

torch.set_num_threads(1)

# hand-written: L = activation(P_e) - conjugate(P_f) with the code's pairs, expanded by hand
HAND = {
    "total_variation": lambda pe, pf: -math.tanh(pe) / 2 + math.tanh(pf) / 2,
    "kl": lambda pe, pf: -pe + math.exp(pf - 1),
    "reverse_kl": lambda pe, pf: math.exp(pe) - 1 - pf,
    "jeffrey": lambda pe, pf: -pe + pf + pf ** 2 / 4 + pf ** 3 / 16,
    "squared_hellinger": lambda pe, pf: math.exp(pe) - 1 + (1 - math.exp(pf)) / math.exp(pf),
    "pearson": lambda pe, pf: -pe + pf ** 2 / 4 + pf,
    "neyman": lambda pe, pf: math.exp(pe) - 1 + 2 - 2 * math.sqrt(1 - pf),
    "jensen_shannon": lambda pe, pf: (math.log(1 + math.exp(-pe)) - math.log(2)
                                      + pf + math.log(1 + math.exp(-pf)) - math.log(2)),
}

# fixed logits [B=2, T=5, V=4]; the first two positions of each sequence are the question (-100)
LOGITS = torch.tensor([[[1.0, 0.2, -0.5, 0.0], [0.3, 2.0, 0.1, -1.0], [0.0, 0.0, 1.5, 0.5],
                        [-0.2, 0.4, 0.9, 1.1], [0.6, -0.3, 0.2, 0.0]],
                       [[0.5, 0.5, 0.5, 0.5], [2.0, -1.0, 0.0, 0.3], [0.1, 0.2, 0.3, 0.4],
                        [1.2, 0.0, -0.7, 0.8], [0.0, 1.0, 0.0, -1.0]]], dtype=torch.float64)
LABELS = torch.tensor([[-100, -100, 2, 3, 0], [-100, -100, 1, 0, -100]])


def _hand_probs(logits, labels):
    """Answer-token probabilities by hand: softmax of position t's logits at label t+1."""
    out, lg, lab = [], logits.tolist(), labels.tolist()
    for b in range(len(lab)):
        for t in range(len(lab[b]) - 1):
            y = lab[b][t + 1]
            if y == -100:
                continue
            z = [math.exp(v) for v in lg[b][t]]
            out.append(z[y] / sum(z))
    return out


def test_mean_token_probability_is_the_codes_padded_mean():
    ps = _hand_probs(LOGITS, LABELS)
    assert len(ps) == 5
    got = F.mean_token_prob(LOGITS, LABELS, max_length=500)
    assert got.item() == pytest.approx(sum(ps) / (2 * 499), rel=1e-6)
    # max_length 0: the mean over answer tokens
    assert F.mean_token_prob(LOGITS, LABELS, max_length=0).item() == pytest.approx(sum(ps) / 5, rel=1e-6)


@pytest.mark.parametrize("div", sorted(F.DIVERGENCES))
def test_flat_loss_equals_the_hand_computation(div):
    torch.manual_seed(0)
    other = LOGITS.flip(-1) * 1.7  # the template batch: other logits, same label layout
    pf = sum(_hand_probs(LOGITS, LABELS)) / 5
    pe = sum(_hand_probs(other, LABELS)) / 5
    got = F.flat_loss(F.mean_token_prob(LOGITS, LABELS, 0), F.mean_token_prob(other, LABELS, 0), div)
    assert got.item() == pytest.approx(HAND[div](pe, pf), rel=1e-9, abs=1e-12)
    # and at the code's default normaliser
    pf5, pe5 = pf * 5 / (2 * 499), pe * 5 / (2 * 499)
    got = F.flat_loss(F.mean_token_prob(LOGITS, LABELS), F.mean_token_prob(other, LABELS), div)
    assert got.item() == pytest.approx(HAND[div](pe5, pf5), rel=1e-9, abs=1e-12)


# sign of (dL/dP_f, dL/dP_e) as the code's pairs give them (hand derivatives of HAND): descent lowers P_f and raises
# P_e for TV, KL, Jeffrey, Pearson and JS; the code's Reverse-KL and Squared-Hellinger pairs point the other way on both,
# its Neyman pair lowers P_e too (a property of the published code, kept as is: see flat.py)
SIGNS = {"total_variation": (1, -1), "kl": (1, -1), "jeffrey": (1, -1), "pearson": (1, -1), "jensen_shannon": (1, -1),
         "reverse_kl": (-1, 1), "squared_hellinger": (-1, 1), "neyman": (1, 1)}


def test_flat_gradient_signs_per_divergence():
    assert set(SIGNS) == set(F.DIVERGENCES)
    for div, (sf, se) in SIGNS.items():
        pf = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
        pe = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
        F.flat_loss(pf, pe, div).backward()
        assert (float(pf.grad) > 0) == (sf > 0) and (float(pe.grad) > 0) == (se > 0), (div, pf.grad, pe.grad)


def test_gradient_ascent_and_npo_losses_equal_hand_computations():
    ps = _hand_probs(LOGITS, LABELS)
    ce = [-math.log(p) for p in ps]
    assert F.grad_ascent_loss(LOGITS, LABELS).item() == pytest.approx(-sum(ce) / len(ce), rel=1e-12)
    nll = F.sequence_nll(LOGITS, LABELS)
    assert nll.tolist() == pytest.approx([sum(ce[:3]), sum(ce[3:])], rel=1e-12)
    ref = torch.tensor([1.5, 4.0], dtype=torch.float64)
    beta = 0.1

    def logsig(x):
        return -math.log(1 + math.exp(-x))
    hand = -2 / beta * sum(logsig(beta * (float(n) - float(r))) for n, r in zip(nll, ref, strict=True)) / 2
    assert F.npo_loss(nll, ref, beta).item() == pytest.approx(hand, rel=1e-12)


# ---- a tiny Llama on fictitious authors ------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def tiny_tokenizer():
    """A byte-level BPE trained on the fictitious authors' texts and the templates (shared by the FLAT test files)."""
    from services.generation.training import train_tokenizer

    texts = list(F.TEMPLATE_ANSWERS)
    for n, seed in ((6, 1), (5, 2)):
        d = A.generate(n, seed=seed)
        texts += [F.prompt_text(r["question"]) + " " + r["answer"] for r in d["qa"]]
        texts += [r["paraphrased_answer"] for r in d["qa"]] + [p for r in d["qa"] for p in r["perturbed_answers"]]
    return train_tokenizer(texts * 3, 300)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def tiny_llama(tok, seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).eval()


def test_left_padded_probabilities_equal_unpadded_forwards(tok):
    model = tiny_llama(tok)
    recs = A.generate(2, seed=3)["qa"][:5]
    enc = [F.encode(tok, r["question"], r["answer"]) for r in recs]
    b = F.collate(enc, F.pad_id(tok))
    got = F.mean_token_prob(*F.forward(model, b), max_length=0)
    total, n = 0.0, 0
    with torch.no_grad():
        for ids, lab in enc:
            logits = model(input_ids=torch.tensor([ids])).logits[0]
            ps = _hand_probs(logits.unsqueeze(0), torch.tensor([lab]))
            total, n = total + sum(ps), n + len(ps)
    assert got.item() == pytest.approx(total / n, rel=1e-4)


@pytest.fixture(scope="module")
def finetuned(tok):
    d = A.generate(3, seed=2)
    qa = [F.QA(r["question"], r["answer"], r["id"]) for r in d["qa"]]
    cfg = F.TrainConfig(method="finetune", adaptation="full", lr=1e-2, epochs=12, batch_size=6, seed=0)
    tr = F.Trainer(tiny_llama(tok), tok, qa, cfg)
    logs = tr.run()
    assert logs[-1]["nll"] < logs[0]["nll"] - 1.0  # it learned the answers
    return tr.final_model(), d


@pytest.mark.parametrize("div", ["total_variation", "kl"])
def test_flat_on_fictitious_authors_forgets_and_answers_with_templates(tok, finetuned, div):
    import copy

    model, d = finetuned
    forget = A.by_author(d["qa"])["author-000"]
    templates = F.TEMPLATE_ANSWERS[:1]  # one template: its probability is pushed at every step
    before_f = float(torch.exp(-E.avg_losses(model, tok, [(r["question"], r["answer"]) for r in forget])).mean())
    before_t = E.template_probability(model, tok, forget, templates)
    cfg = F.TrainConfig(method="flat", divergence=div, adaptation="full", lr=1e-3, epochs=25, batch_size=16,
                        max_length=0, templates=templates, seed=0)
    tr = F.Trainer(copy.deepcopy(model), tok, [F.QA(r["question"], r["answer"]) for r in forget], cfg)
    tr.run()
    um = tr.final_model()
    after_f = float(torch.exp(-E.avg_losses(um, tok, [(r["question"], r["answer"]) for r in forget])).mean())
    after_t = E.template_probability(um, tok, forget, templates)
    assert after_f < 0.6 * before_f, (before_f, after_f)  # seen: 0.062 -> 0.017 (TV), 0.021 (KL)
    assert after_t > 1.3 * before_t, (before_t, after_t)  # seen: 0.016 -> 0.028 (TV), 0.032 (KL)


def test_a_resumed_trainer_continues_bit_for_bit(tok, finetuned):
    import copy

    model, d = finetuned
    forget = [F.QA(r["question"], r["answer"]) for r in A.by_author(d["qa"])["author-001"]]
    for method in ("flat", "npo", "gradient_ascent"):
        cfg = F.TrainConfig(method=method, lr=5e-3, epochs=4, batch_size=3, seed=1)
        retain = [F.QA(r["question"], r["answer"]) for r in A.by_author(d["qa"])["author-002"]]
        straight = F.Trainer(copy.deepcopy(model), tok, forget, cfg, retain=retain)
        straight.run()
        first = F.Trainer(copy.deepcopy(model), tok, forget, cfg, retain=retain)
        for _ in range(3):
            first.step()
        saved = first.state()
        torch.manual_seed(1234)  # a fresh process: other RNG state
        second = F.Trainer(copy.deepcopy(model), tok, forget, cfg, retain=retain)
        second.load_state(saved)
        second.run()
        assert second.step_no == straight.step_no == straight.total == 8
        a = dict(straight.model.named_parameters())
        for n, p in second.model.named_parameters():
            if p.requires_grad:
                torch.testing.assert_close(p, a[n], rtol=0, atol=0, msg=f"{method} {n}")


def test_evaluation_metrics_on_known_values():
    assert E.rouge_l_recall("was born in Lisbon in 1950", "born in Lisbon") == 1.0
    assert E.rouge_l_recall("Paris", "The capital is Paris") == pytest.approx(0.25)
    ratios = torch.tensor([0.5, 1.0, 2.0])
    assert E.forget_quality(ratios, ratios)["forget_quality"] == pytest.approx(1.0)
    far = E.forget_quality(torch.linspace(0.01, 0.1, 30), torch.linspace(1.0, 3.0, 30))
    assert far["forget_quality"] < 1e-6 and far["ks_statistic"] == 1.0
    t = {"gt": torch.tensor([0.0]), "para": torch.tensor([math.log(2.0)]), "pert": torch.tensor([[math.log(4.0)] * 3])}
    # R = exp(mean pert loss - para loss) = exp(log 4 - log 2) = 2
    assert E.truth_ratio_stat(t).item() == pytest.approx(2.0)
