"""The built-in corpus's long-context tasks: key-value lookups, passkey retrieval and multi-document questions are
pure functions of their seed, have exactly one right answer that only the context gives, and appear in the
training documents in the shape the evaluation prompts have."""
from __future__ import annotations

import random
import re

import pytest

from services.generation import corpus

SEEDS = range(5)


@pytest.mark.parametrize("seed", SEEDS)
def test_passkey_hides_one_key_among_the_filler(seed):
    examples = corpus.passkey_set(seed, 40, 6)
    assert examples == corpus.passkey_set(seed, 40, 6)  # deterministic
    assert examples != corpus.passkey_set(seed + 100, 40, 6)
    positions = set()
    for ex in examples:
        assert ex.kind == "passkey" and ex.n_records == 6 and re.fullmatch(r"\d{5}", ex.answer)
        assert ex.prompt.startswith("passkey : ") and ex.prompt.endswith(" what is the pass key ?")
        assert ex.prompt.count(ex.answer) == 1 and len(re.findall(r"\d{5}", ex.prompt)) == 1
        sentences = ex.prompt[len("passkey : "):-len(" what is the pass key ?")].split(" . ")
        at = next(i for i, s in enumerate(sentences) if "pass key" in s)
        positions.add(at)
        assert len(sentences) == 7 and all(s.rstrip(" .") + " ." in corpus.FILLER
                                           for i, s in enumerate(sentences) if i != at)
    assert positions == set(range(7))  # the key is hidden anywhere, ends included
    assert len({ex.answer for ex in examples}) > 30


@pytest.mark.parametrize("seed", SEEDS)
def test_multidoc_questions_are_answered_by_exactly_one_document(seed):
    examples = corpus.multidoc_set(seed, 40, 5)
    assert examples == corpus.multidoc_set(seed, 40, 5)
    seen, unseen = corpus.entities(seed)
    closed_book = {e.name for e in seen + unseen}
    asked_at, kinds = set(), set()
    for ex in examples:
        assert ex.kind == "multidoc" and ex.prompt.startswith("documents : [1] ") and ex.prompt.endswith(" answer :")
        body, question = ex.prompt[len("documents : "):].split(" question : ")
        docs = re.split(r" ?\[\d+\] ", body)[1:]
        assert len(docs) == 5
        names = [d.split()[0] for d in docs]
        assert len(set(names)) == 5 and not set(names) & closed_book  # answers cannot be recalled
        m = re.fullmatch(r"(where|what) does (\w+) (live|do) \? answer :", question)
        assert m and m.group(2) in names
        doc = docs[names.index(m.group(2))]
        if m.group(1) == "where":
            assert doc == f"{m.group(2)} lives in {ex.answer} ."
        else:
            assert doc == f"{m.group(2)} works as a {ex.answer} ." and ex.answer in corpus.TRADES
        asked_at.add(names.index(m.group(2)))
        kinds.add(m.group(1))
    assert asked_at == set(range(5)) and kinds == {"where", "what"}


@pytest.mark.parametrize("seed", SEEDS)
def test_training_corpus_has_every_task_in_the_shape_of_its_evaluation(seed):
    docs = corpus.builtin_corpus(seed, n_retrieval=200, max_records=9, qa_repeats=1)
    assert docs == corpus.builtin_corpus(seed, n_retrieval=200, max_records=9, qa_repeats=1)
    by_kind: dict[str, list[str]] = {}
    for d in docs:
        by_kind.setdefault(d.split(" ")[0], []).append(d)
    assert {"fact", "question", "records", "passkey", "documents"} <= set(by_kind)
    assert len(by_kind["passkey"]) == len(by_kind["documents"]) == 10  # n_retrieval // 20 by default
    for d in by_kind["passkey"]:
        key = re.search(r"the pass key is (\d{5}) \.", d).group(1)
        assert d.endswith(f" what is the pass key ? {key} .")
        assert 1 <= d.count(" . ") - 1 <= 3  # 1..max_records // 3 filler sentences (each ends " . ")
    for d in by_kind["documents"]:
        name = re.search(r"question : \w+ does (\w+)", d).group(1)
        said = re.search(rf"\] {name} (?:lives in|works as a) (\w+) \.", d).group(1)
        assert d.endswith(f"answer : {said} .") and 2 <= d.count("] ") <= 3
    counts = corpus.builtin_corpus(seed, n_retrieval=20, n_passkey=7, n_multidoc=3, qa_repeats=0)
    assert sum(d.startswith("passkey") for d in counts) == 7 and sum(d.startswith("documents") for d in counts) == 3
    assert sum(d.startswith("records") for d in counts) == 20


def test_passkey_digits_are_single_tokens(tokenizer):
    ex = corpus.passkey_set(0, 1, 3)[0]
    ids = tokenizer(f" {ex.answer}", add_special_tokens=False)["input_ids"]
    assert [tokenizer.decode([i]).strip() for i in ids if tokenizer.decode([i]).strip()] == list(ex.answer)


@pytest.mark.parametrize("seed", SEEDS)
def test_copy_documents_repeat_their_words_and_change_no_other_document(seed):
    rng = random.Random(seed)
    for _ in range(20):
        d = corpus.copy_document(rng)
        first, second = re.fullmatch(r"copy : (.+) ; again : (.+) \.", d).groups()
        assert first == second and 6 <= len(first.split()) <= 20 and corpus.is_copy_document(d)
    base = corpus.builtin_corpus(seed, n_retrieval=50, qa_repeats=1)
    more = corpus.builtin_corpus(seed, n_retrieval=50, qa_repeats=1, n_copy=30)
    assert sum(map(corpus.is_copy_document, more)) == 30 and not any(map(corpus.is_copy_document, base))
    assert sorted(d for d in more if not corpus.is_copy_document(d)) == sorted(base)


@pytest.mark.parametrize("seed", SEEDS)
def test_values_of_several_words_are_distinct_words_the_lookup_continues_with(seed):
    for ex in corpus.retrieval_set(seed, 10, 24, value_words=2):
        records = ex.prompt.split(" ; lookup ")[0].removeprefix("records : ").split(" ; ")
        words = [w for r in records for w in r.split()[1:]]
        assert len(records) == 24 and len(words) == 48 == len(set(words)) and set(words) <= set(corpus.VALUE_WORDS)
        key = ex.prompt.rsplit(" ", 1)[1]
        assert f"{key} {ex.answer} ;" in ex.prompt + " ;" and len(ex.answer.split()) == 2
    one = corpus.retrieval_set(seed, 10, 8)
    assert one == corpus.retrieval_set(seed, 10, 8, value_words=1)
    assert all(ex.answer in corpus.VALUE_WORDS for ex in one)
    doc = corpus.retrieval_document(random.Random(seed), 5, 3, value_words=3)
    assert all(len(a.split()) == 4 for a in doc.removesuffix(" .").split(" ; lookup ")[1:])  # key + 3 words
