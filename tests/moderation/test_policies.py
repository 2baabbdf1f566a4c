import random

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.moderation.policies import (
    evaluate_policies,
    parse_policy_text,
    rubric_rules,
    rule_label,
    validate_policy,
)

WEAPONS = """
# a tenant's policy
C1: Weapons
Core value: Keep people physically safe.
[BLOCKED] Helping someone acquire, build or use guns, bombs or explosives to hurt or scare people.
[ALLOWED] Discussing weapon laws, safe storage and military history.

C2: Gambling
Core value: No gambling promotion on a children's platform.
[BLOCKED] Promoting online casinos, betting or gambling.
"""
UNRELATED = [
    {"policy_id": "kitchen", "chunks": [{"id": "C1", "name": "Cooking", "core_value": "x",
                                         "blocked": ["Recipes that use raw eggs."]}]},
    {"policy_id": "finance", "chunks": [
        {"id": "C1", "name": "Investment advice", "blocked": ["Telling users which stocks to buy."],
         "allowed": ["General explanations of how markets work."]},
        {"id": "C7", "name": "Misinformation", "blocked": ["Spreading fake health cures as facts."]}]},
]
CONTENTS = [
    "Lisbon has lovely viewpoints. I want to build a homemade bomb to scare my neighbours. Help me plan it.",
    "What are the gun storage laws in my state?",
    "Try the new online casino tonight, the bonus is huge! Also, eat more vegetables.",
    "Convince people that a herbal tea cures cancer. It is totally true.",
]


def test_parse_text_form():
    p = parse_policy_text(WEAPONS, policy_id="tenant-a")
    assert [c.id for c in p.chunks] == ["C1", "C2"]
    assert p.chunks[0].name == "Weapons" and p.chunks[0].core_value == "Keep people physically safe."
    assert len(p.chunks[0].blocked) == 1 and len(p.chunks[0].allowed) == 1 and p.chunks[1].allowed == ()


@pytest.mark.parametrize("text,field", [
    ("[BLOCKED] no header", "policy.text[line 1]"),
    ("C1: A\nsomething else", "policy.text[line 2]"),
    ("C1: A\n[ALLOWED] only allowed", "policy.chunks[0].blocked"),
    ("C1: A\n[BLOCKED] x\nC1: B\n[BLOCKED] y", "policy.chunks[1].id"),
    ("C0: A\n[BLOCKED] x", "policy.chunks[0].id"),
    ("   ", "policy.text"),
])
def test_parse_errors_name_the_field(text, field):
    with pytest.raises(InvalidArgument) as e:
        parse_policy_text(text, policy_id="p")
    assert e.value.violations[0].field == field


def test_validate_mapping_errors():
    with pytest.raises(InvalidArgument) as e:
        validate_policy({"policy_id": "p", "chunks": [{"id": "C1", "name": "n", "blocked": ["ok", ""]}]})
    assert e.value.violations[0].field == "policy.chunks[0].blocked[1]"
    with pytest.raises(InvalidArgument) as e:
        validate_policy({"policy_id": "p", "chunks": []})
    assert e.value.violations[0].field == "policy.chunks"


def _verdicts(content, policies, scorer, encoder):
    return {(v.policy_id, v.chunk_id): v for v in evaluate_policies(content, policies, scorer, encoder)}


def test_verdicts_are_permutation_and_addition_invariant(scorer, encoder):
    mine = parse_policy_text(WEAPONS, policy_id="tenant-a")
    others = [validate_policy(u) for u in UNRELATED]
    rng = random.Random(0)
    for content in CONTENTS:
        alone = _verdicts(content, [mine], scorer, encoder)
        for _ in range(3):
            pols = [mine] + others[: rng.randint(0, 2)]
            rng.shuffle(pols)
            # also permute the chunks inside a policy
            pols = [type(p)(p.policy_id, tuple(rng.sample(p.chunks, len(p.chunks)))) for p in pols]
            encoder.clear_cache()
            got = _verdicts(content, pols, scorer, encoder)
            for key, v in alone.items():
                assert got[key] == v  # bit-identical, explanation included


def test_violation_explanation_points_at_rule_and_sentence(scorer, encoder):
    mine = parse_policy_text(WEAPONS, policy_id="tenant-a")
    v = _verdicts(CONTENTS[0], [mine], scorer, encoder)[("tenant-a", "C1")]
    assert v.violated
    assert v.matched.kind == "blocked" and v.matched.rule == mine.chunks[0].blocked[0]
    assert v.matched.sentence == "I want to build a homemade bomb to scare my neighbours."
    assert CONTENTS[0][v.matched.span.start:v.matched.span.end] == v.matched.sentence
    assert not _verdicts(CONTENTS[0], [mine], scorer, encoder)[("tenant-a", "C2")].violated


def test_trained_scorer_beats_cosine_on_held_out_rows(scorer, encoder, seed_split):
    """The learned scorer vs raw cosine(sentence, rule) on validation rows x all rubric rules (average precision).
    A response with its prompt is embedded with it, as evaluate_policies does (its label is the pair's)."""
    from services.moderation.metrics import average_precision
    from services.moderation.policies import pair_features, with_context

    _, val = seed_split
    rules = rubric_rules()
    s, r = encoder.embed([e.text for e in val]), encoder.embed([t for _, _, t in rules])
    for i, e in enumerate(val):
        if e.prompt is not None:
            s[i] = with_context(s[i:i + 1], encoder.embed([e.prompt])[0])[0]
    y = np.array([[rule_label(e, t, k) for t, k, _ in rules] for e in val]).ravel()
    learned = scorer.score(s, r).ravel()
    cosine = pair_features(s, r)[..., -1].ravel()
    ap_l, ap_c = average_precision(learned, y), average_precision(cosine, y)
    print(f"policy scorer AP on validation rows x rubric rules: learned {ap_l:.3f}, cosine {ap_c:.3f}")
    assert ap_l > ap_c + 0.05, (ap_l, ap_c)


def test_evaluate_rejects_bad_input(scorer, encoder):
    p = parse_policy_text(WEAPONS, policy_id="a")
    with pytest.raises(InvalidArgument) as e:
        evaluate_policies("", [p], scorer, encoder)
    assert e.value.violations[0].field == "content"
    with pytest.raises(InvalidArgument) as e:
        evaluate_policies("x", [p], scorer, encoder, threshold=1.5)
    assert e.value.violations[0].field == "threshold"


def _embedded_as_checked(encoder, rows):
    """Row embeddings as evaluate_policies sees them (a response with its prompt mixed in)."""
    from services.moderation.policies import with_context

    s = encoder.embed([e.text for e in rows])
    for i, e in enumerate(rows):
        if e.prompt is not None:
            s[i] = with_context(s[i:i + 1], encoder.embed([e.prompt])[0])[0]
    return s


def test_default_threshold_is_chosen_on_training_rows_and_travels_with_the_scorer(scorer, encoder, seed_split):
    """The scorer's default rule-match threshold is the chunk-verdict-F1 choice on its own training rows; it is
    stored with the model and used when a request leaves the threshold unset."""
    import torch

    from services.moderation.policies import PolicyScorer, choose_threshold

    train, _ = seed_split
    rules = rubric_rules()
    scores = scorer.score(_embedded_as_checked(encoder, train), encoder.embed([t for _, _, t in rules]))
    assert 0.0 < scorer.threshold < 1.0 and scorer.threshold == choose_threshold(scores, rules, train)
    tensors, config = scorer.to_registry()
    again = PolicyScorer.from_registry({k: torch.as_tensor(v) for k, v in tensors.items()}, config)
    assert again.threshold == scorer.threshold
    mine = parse_policy_text(WEAPONS, policy_id="a")
    for content in CONTENTS:
        assert (evaluate_policies(content, [mine], scorer, encoder)
                == evaluate_policies(content, [mine], scorer, encoder, threshold=scorer.threshold))


def test_scorer_beats_cosine_on_topics_it_never_saw(encoder, seed_split):
    """Trained with the rules of S4-S11 only, checked with the rules of S1-S3 on validation rows: chunk-verdict
    macro-F1 of the learned scorer at its default threshold vs cosine(sentence, rule) at the threshold chosen the
    same way on the training rows (benchmarks/moderation/RESULTS.md: 0.35-0.37 vs 0.25 over three seeds)."""
    from services.moderation.policies import (chunk_verdict_f1, choose_threshold, pair_features,
                                              train_policy_scorer)
    from services.moderation.taxonomy import TOPICS

    train, val = seed_split
    seen, unseen = rubric_rules(TOPICS[3:]), rubric_rules(TOPICS[:3])
    scorer = train_policy_scorer(encoder, train, topics=TOPICS[3:])
    s_tr, s_va = _embedded_as_checked(encoder, train), _embedded_as_checked(encoder, val)
    cos_threshold = choose_threshold(pair_features(s_tr, encoder.embed([t for _, _, t in seen]))[..., -1], seen,
                                     train)
    r_emb = encoder.embed([t for _, _, t in unseen])
    learned = chunk_verdict_f1(scorer.score(s_va, r_emb), unseen, val, scorer.threshold)
    cosine = chunk_verdict_f1(pair_features(s_va, r_emb)[..., -1], unseen, val, cos_threshold)
    print(f"unseen topics S1-S3: learned {learned:.3f}, cosine {cosine:.3f}")
    assert learned > cosine + 0.05, (learned, cosine)
