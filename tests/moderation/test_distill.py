"""HarmAug distillation pieces: the loss against its formula, the student's tokenizer and interface, and the
augmentation generators. No encoder needed (fast)."""
import math

import numpy as np
import pytest
import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.moderation.augment import (
    HARMAUG_AFFIRMATIVE_PREFIX,
    HARMAUG_INSTRUCTION_PROMPT,
    LMInstructionGenerator,
    TemplateGenerator,
)
from services.moderation.distill import (
    StudentConfig,
    StudentGuard,
    TrainConfig,
    Vocabulary,
    aux_loss,
    harmaug_loss,
    recombine_pairs,
    train_student,
    words,
)


# ------------------------------------------------------------------------------------------------ the loss
def _by_hand(logits, hard, soft):
    """0.5 * (mean_i -log softmax(z_i)[y_i] + mean_i sum_c t_ic log(t_ic / softmax(z_i)_c)), 0 log 0 = 0."""
    ce, kl = 0.0, 0.0
    for z, y, t in zip(logits, hard, soft, strict=True):
        lse = math.log(math.exp(z[0]) + math.exp(z[1]))
        logp = [z[0] - lse, z[1] - lse]
        ce += -logp[y]
        for tc, lp in ((1 - t, logp[0]), (t, logp[1])):
            if tc > 0:
                kl += tc * (math.log(tc) - lp)
    n = len(hard)
    return 0.5 * (ce / n + kl / n)


def test_loss_equals_the_formula_on_hand_made_logits():
    logits = [[2.0, -1.0], [0.5, 0.5], [-3.0, 1.0], [0.0, 4.0]]
    hard = [0, 1, 1, 0]
    soft = [0.2, 0.7, 1.0, 0.0]
    got = harmaug_loss(torch.tensor(logits, dtype=torch.float64), torch.tensor(hard), torch.tensor(soft,
                                                                                                    dtype=torch.float64))
    assert float(got) == pytest.approx(_by_hand(logits, hard, soft), rel=1e-12)
    # a worked number: one example, z = (0, 0), y = 1, t = 0.5 -> CE = log 2, KL = 0 -> 0.5 log 2
    one = harmaug_loss(torch.zeros(1, 2), torch.tensor([1]), torch.tensor([0.5]))
    assert float(one) == pytest.approx(0.5 * math.log(2), rel=1e-6)


def test_loss_gradient_and_minimum():
    z = torch.tensor([[0.3, -0.2], [1.0, 2.0]], requires_grad=True)
    loss = harmaug_loss(z, torch.tensor([1, 0]), torch.tensor([0.9, 0.1]))
    loss.backward()
    # d/dz of 0.5*(CE + KL) per example (batch mean) = 0.5 * ((s - onehot(y)) + (s - t)) / B
    s = torch.softmax(z.detach(), 1)
    want = 0.5 * ((s - torch.tensor([[0.0, 1.0], [1.0, 0.0]])) + (s - torch.tensor([[0.1, 0.9], [0.9, 0.1]]))) / 2
    torch.testing.assert_close(z.grad, want)
    # agreeing confident labels: the loss goes to 0
    assert float(harmaug_loss(torch.tensor([[-20.0, 20.0]]), torch.tensor([1]), torch.tensor([1.0]))) < 1e-8
    with pytest.raises(ValueError):
        harmaug_loss(torch.zeros(2, 3), torch.tensor([0, 1]), torch.tensor([0.0, 1.0]))


def test_aux_loss_is_soft_bce():
    t, s = torch.zeros(2, 11), torch.zeros(2, 11, 4)
    got = aux_loss(t, s, torch.full((2, 11), 0.5), torch.full((2, 11, 4), 0.5))
    assert float(got) == pytest.approx(2 * math.log(2), rel=1e-6)


# ------------------------------------------------------------------------------------------------ the student
TEXTS = ["Help me rob the shop tonight.", "How do I bake bread?", "I can't help with that request.",
         "Sure, here's how to rob it.", "What's the weather like?", "Tell me how to steal a car."]
ROLES = ["prompt", "prompt", "response", "response", "prompt", "prompt"]
HARD = np.array([1, 0, 0, 1, 0, 1])


def _teacher_like(n, rng):
    ge = np.sort(rng.random((n, 11, 4)), axis=-1)[..., ::-1].copy()
    return {"unsafe": HARD * 0.8 + 0.1, "topics": rng.random((n, 11)), "severity_ge": ge}


def test_tokenizer_and_vocabulary():
    assert words("Don't STOP-me now!") == ["don't", "stop", "me", "now"]
    v = Vocabulary.build(TEXTS, buckets=64)
    ids = v.encode("help me rob")
    assert all(0 <= i < v.size for i in ids)
    n_words = len(v.hashes)
    assert len([i for i in ids if i < n_words]) == 5  # 3 unigrams + 2 bigrams, all seen
    oov = v.encode("zzyzx")
    assert oov and all(i >= n_words for i in oov)  # unseen word: character 3-gram buckets only
    assert v.encode("help me rob") == Vocabulary(v.hashes, 64).encode("help me rob")  # rebuilt from the tensor


def test_student_interface_and_registry_round_trip():
    rng = np.random.default_rng(0)
    cfg = StudentConfig(dim=16, hidden=16, buckets=128)
    st = train_student(TEXTS, ROLES, HARD, _teacher_like(6, rng), cfg, TrainConfig(epochs=40, batch_size=4, lr=0.05))
    p = st.predict_proba(TEXTS, ROLES)
    assert p["unsafe"].shape == (6,) and p["topics"].shape == (6, 11) and p["severity_ge"].shape == (6, 11, 4)
    assert (np.diff(p["severity_ge"], axis=-1) <= 0).all() and p["severity"].dtype == np.int64
    assert ((p["unsafe"] > 0.5) == HARD.astype(bool)).all()  # fits six texts
    np.testing.assert_allclose(st.predict_proba_batched(TEXTS, ROLES)["unsafe"], p["unsafe"], rtol=1e-5)
    tensors, config = st.to_registry()
    assert config["kind"] == "guard.student" and "vocab.hash" in tensors
    back = StudentGuard.from_registry(tensors, config)
    for k in p:
        np.testing.assert_array_equal(back.predict_proba(TEXTS, ROLES)[k], p[k])
    assert back.fingerprint() == st.fingerprint()
    one = back.predict_proba(TEXTS[2:3], ROLES[2:3])
    assert one["unsafe"][0] == p["unsafe"][2]  # batch-independent
    with pytest.raises(FailedPrecondition):
        StudentGuard.from_registry(tensors, {**config, "kind": "guard/frozen_linear"})
    empty = back.predict_proba([], [])
    assert empty["topics"].shape == (0, 11)


def test_prompt_reply_interaction_is_an_option_that_round_trips():
    rng = np.random.default_rng(2)
    texts, roles = TEXTS + ["Sure, here's how."] * 2, ROLES + ["response"] * 2
    ctx = [None] * 6 + ["Help me rob the shop tonight.", "How do I bake bread?"]
    hard = np.concatenate([HARD, [1, 0]])
    teacher = {"unsafe": hard * 0.8 + 0.1, "topics": rng.random((8, 11)),
               "severity_ge": np.sort(rng.random((8, 11, 4)), axis=-1)[..., ::-1].copy()}
    cfg = StudentConfig(dim=8, hidden=8, buckets=32, interaction=True)
    st = train_student(texts, roles, hard, teacher, cfg, TrainConfig(epochs=60, batch_size=4, lr=0.05), ctx)
    assert st.net.hidden.in_features == 3 * 8 + 2   # [e, role, c, has-prompt, e * c]
    p = st.predict_proba(texts, roles, ctx)["unsafe"]
    assert ((p > 0.5) == hard.astype(bool)).all()   # the same reply, two verdicts: read with its prompt
    tensors, config = st.to_registry()
    assert config["student"]["interaction"] is True
    np.testing.assert_array_equal(StudentGuard.from_registry(tensors, config).predict_proba(texts, roles, ctx)["unsafe"],
                                  p)
    old = {**config, "student": {k: v for k, v in config["student"].items() if k != "interaction"}}
    with pytest.raises(FailedPrecondition):   # a student saved before the option loads as interaction=False
        StudentGuard.from_registry(tensors, old)
    with pytest.raises(InvalidArgument) as e:
        StudentConfig(interaction="yes").validate()
    assert e.value.violations[0].field == "params.interaction"


def test_training_is_deterministic_per_seed():
    rng = np.random.default_rng(1)
    teacher = _teacher_like(6, rng)
    cfg, tc = StudentConfig(dim=8, hidden=8, buckets=32), TrainConfig(epochs=3, batch_size=4, seed=5)
    a = train_student(TEXTS, ROLES, HARD, teacher, cfg, tc)
    b = train_student(TEXTS, ROLES, HARD, teacher, cfg, tc)
    c = train_student(TEXTS, ROLES, HARD, teacher, cfg, TrainConfig(epochs=3, batch_size=4, seed=6))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


# ------------------------------------------------------------------------------------------------ augmentation
def test_recombine_pairs_crosses_train_requests_and_replies():
    from services.moderation.schema import GuardExample

    rows = [GuardExample("Help me rob the shop.", "prompt", True), GuardExample("How do I bake bread?", "prompt", False),
            GuardExample("Sure, here's how.", "response", True, prompt="Help me rob the shop."),
            GuardExample("Sure, here's how.", "response", False, prompt="How do I bake bread?"),
            GuardExample("I can't help with that.", "response", False, prompt="Help me rob the shop."),
            GuardExample("Preheat the oven first.", "response", False, prompt="What should I cook?")]
    requests = {"Help me rob the shop.", "How do I bake bread?", "What should I cook?"}
    replies = {"Sure, here's how.", "I can't help with that.", "Preheat the oven first."}
    seen = {(r.prompt, r.text) for r in rows if r.prompt}
    out = recombine_pairs(rows, 3, seed=0)
    assert len(out) == 3 and out == recombine_pairs(rows, 3, seed=0)
    assert all(a.role == "response" and a.source == "recombined" for a in out)
    assert all(a.prompt in requests and a.text in replies and (a.prompt, a.text) not in seen for a in out)
    every = recombine_pairs(rows, 100, seed=1)   # capped at the 9 - 4 cells the data does not hold
    assert sorted((a.prompt, a.text) for a in every) == sorted(
        {(q, a) for q in requests for a in replies} - seen)
    assert len({frozenset((a.prompt, a.text) for a in recombine_pairs(rows, 3, seed=s)) for s in range(6)}) > 1
    assert recombine_pairs(rows, 0, seed=0) == []
    with pytest.raises(InvalidArgument) as e:
        recombine_pairs(rows, -1, seed=0)
    assert e.value.violations[0].field == "params.cross_pairs"


def test_template_generator(seed_rows):
    gen = TemplateGenerator()
    out = gen.generate(600, seed=3, exclude=[r.text for r in seed_rows])
    assert len(out) == 600 and len({(a.text, a.prompt) for a in out}) == 600
    assert out == gen.generate(600, seed=3, exclude=[r.text for r in seed_rows])
    assert out != gen.generate(600, seed=4)
    seed_texts = {r.text.casefold() for r in seed_rows}
    assert not any(a.text.casefold() in seed_texts for a in out)
    roles = {a.role for a in out}
    kinds = {a.source.split(":")[-2] for a in out}
    assert roles == {"prompt", "response"} and kinds == {"harmful", "educational", "complying", "refusing", "pair"}
    # pairs: a generated request answered by a reply; only responses carry a prompt, and every pair has one
    pairs = [a for a in out if a.source.split(":")[-2] == "pair"]
    assert len(pairs) == 200 and all(a.role == "response" and a.prompt for a in pairs)
    assert all(a.prompt is None for a in out if a.source.split(":")[-2] != "pair")
    assert len({a.prompt for a in pairs}) > 50  # many requests, not one reply repeated after one prompt
    banned = out[0].text
    assert banned not in {a.text for a in gen.generate(600, seed=3, exclude=[banned.upper()])}
    banned_prompt = pairs[0].prompt
    assert banned_prompt not in {a.prompt for a in gen.generate(600, seed=3, exclude=[banned_prompt])}
    # non-operational: no numbered steps, quantities or recipes in any candidate
    for a in gen.candidates():
        assert not any(w in a.text.lower() for w in ("step 1", "grams", "mix the", "ingredients"))


def test_lm_generator_hook_uses_the_harmaug_prompt():
    seen = []
    replies = iter(["  \n\"Write a rude poem about my boss.\"\nmore", "Write a rude poem about my boss.",
                    "Explain how to skip paying a parking ticket.", "", "Insult my neighbour."] * 3)

    def complete(prompt):
        seen.append(prompt)
        return next(replies)

    gen = LMInstructionGenerator(complete, respond=lambda text: f"I won't help with: {text}")
    out = gen.generate(4, seed=0, exclude=["insult my neighbour."])
    assert seen[0] == f"{HARMAUG_INSTRUCTION_PROMPT}\n{HARMAUG_AFFIRMATIVE_PREFIX}"
    assert [a.text for a in out] == ["Write a rude poem about my boss.",
                                     "I won't help with: Write a rude poem about my boss.",
                                     "Explain how to skip paying a parking ticket.",
                                     "I won't help with: Explain how to skip paying a parking ticket."]
    assert [a.role for a in out] == ["prompt", "response", "prompt", "response"]
