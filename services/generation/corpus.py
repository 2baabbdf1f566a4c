"""The built-in generated corpus: text a tiny model trained from scratch on two CPU cores can really learn, with
tasks whose answers are known.

- Facts (closed-book QA). Generated entities with a home town and a trade: "fact : the person vomira lives in
  tulsek and works as a baker ." Questions "question : where does vomira live ? answer : tulsek". Some names are
  *ambiguous* (two entities share a name with different facts: either answer is right, the model cannot know which
  one is meant), some are *unseen* (never in the training text: no answer can be known).
- Retrieval (long context). Key-value records followed by lookups: "records : kafo bam ; rimo dus ; ... ; lookup
  kafo bam". The value must be copied from the context: the word after the earlier occurrence of the key (an
  induction-head task, which a two-layer model can express; a format with a word between key and value would need a
  two-hop composition. A tiny model learns it on a CPU once it has first learned to copy from copy documents,
  below). Keys (64) and values (64) are words that the
  BPE tokenizer keeps whole. The prompt grows with the number of records, so KV-cache compression is tested on a
  task with one known right answer.
- Copy documents (training only): a random sequence of key and value words, then the same sequence again: "copy :
  kafo bam dus rimo ; again : kafo bam dus rimo ." Every word of the second copy is the word after the previous
  occurrence of the word before it: the lookup's copying step (an induction head) with a target at every position
  instead of one per lookup. Trained on first (TrainParams.copy_warmup_steps), they are what lets the tiny model
  learn the lookup on a CPU within minutes (benchmarks/generation/RESULTS.md); without them no run learned it.
- Passkey retrieval (the test of Mohtashami & Jaggi, "Landmark Attention", 2023): a five-digit pass key hidden at a
  random place in repeated filler sentences, asked for at the end: "passkey : the grass is green . ... the pass key
  is 40318 . ... what is the pass key ? 40318 ." Digits are one token each (training.train_tokenizer), so the key
  is copied digit by digit.
- Multi-document questions (the setting of Liu et al., "Lost in the Middle", 2023): several short documents about
  people who are *not* among the closed-book entities, then a question that one document answers: "documents :
  [1] rikaso lives in mone . [2] tubesa works as a pilot . ... question : where does rikaso live ? answer : mone ."
  The answer must be read from the context, not recalled.

Everything is a pure function of its seed."""
from __future__ import annotations

import random
from dataclasses import dataclass

SYLLABLES = ["ka", "fo", "ri", "ta", "mo", "ne", "zu", "li", "pa", "se", "vo", "du", "mi", "ro", "te", "xa", "bi",
             "lu", "go", "we", "ja", "ki", "nu", "so"]
TRADES = ["baker", "pilot", "farmer", "painter", "doctor", "tailor", "miner", "singer", "sailor", "judge"]
EOS = "<|endoftext|>"
PAD = "<pad>"


def _word(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(n))


@dataclass(frozen=True)
class Entity:
    name: str
    town: str
    trade: str


@dataclass(frozen=True)
class QA:
    question: str   # the prompt, ending in "answer :"
    answers: tuple[str, ...]  # every right answer (empty for an unseen entity: nothing can be known)
    kind: str       # "known" | "ambiguous" | "unseen"


def entities(seed: int = 0, n: int = 60, n_ambiguous: int = 6, n_unseen: int = 6) -> tuple[list[Entity], list[Entity]]:
    """(entities in the training text, unseen entities). The first n_ambiguous names appear twice."""
    rng = random.Random(seed)
    towns = sorted({_word(rng, 2) for _ in range(40)})[:12]
    names: list[str] = []
    while len(names) < n + n_unseen:
        w = _word(rng, 3)
        if w not in names and w not in towns:
            names.append(w)
    seen = [Entity(nm, rng.choice(towns), rng.choice(TRADES)) for nm in names[:n]]
    for i in range(n_ambiguous):  # a second entity with the same name and other facts
        e = seen[i]
        seen.append(Entity(e.name, rng.choice([t for t in towns if t != e.town]),
                           rng.choice([t for t in TRADES if t != e.trade])))
    unseen = [Entity(nm, rng.choice(towns), rng.choice(TRADES)) for nm in names[n:]]
    return seen, unseen


def fact_text(e: Entity) -> str:
    return f"fact : the person {e.name} lives in {e.town} and works as a {e.trade} ."


def facts_qa(seed: int = 0) -> list[QA]:
    """Closed-book questions with their known answers."""
    seen, unseen = entities(seed)
    by_name: dict[str, list[Entity]] = {}
    for e in seen:
        by_name.setdefault(e.name, []).append(e)
    out = []
    for name, es in by_name.items():
        kind = "ambiguous" if len(es) > 1 else "known"
        out.append(QA(f"question : where does {name} live ? answer :", tuple(sorted({e.town for e in es})), kind))
        out.append(QA(f"question : what does {name} do ? answer :", tuple(sorted({e.trade for e in es})), kind))
    for e in unseen:
        out.append(QA(f"question : where does {e.name} live ? answer :", (), "unseen"))
    return out


KEY_SYLLABLES = SYLLABLES[:8]
KEY_WORDS = [a + b for a in KEY_SYLLABLES for b in KEY_SYLLABLES]  # the 64 record keys
VALUE_WORDS = [c1 + v + c2 for c1 in "bdgk" for v in "aeiou" for c2 in "mnrs"][:64]


@dataclass(frozen=True)
class Retrieval:
    prompt: str     # "records : k1 v1 ; k2 v2 ; ... ; lookup k" (or a passkey / multi-document prompt)
    answer: str     # the right start of the continuation: the value (one or more words), the pass key or the fact
    n_records: int  # context size: records, filler sentences or documents
    kind: str = "kv"  # "kv" | "passkey" | "multidoc"


def _records(rng: random.Random, n_records: int, value_words: int = 1) -> list[tuple[str, str]]:
    """(key, value) pairs with distinct keys. A value of several words draws all the document's value words
    without repeats (while there are enough), so each word of a value occurs once in the records and the word
    after it can be copied from there."""
    keys = rng.sample(KEY_WORDS, n_records)
    if value_words == 1:
        return [(k, rng.choice(VALUE_WORDS)) for k in keys]
    n = n_records * value_words
    words = rng.sample(VALUE_WORDS, n) if n <= len(VALUE_WORDS) else rng.choices(VALUE_WORDS, k=n)
    return [(k, " ".join(words[i * value_words:(i + 1) * value_words])) for i, k in enumerate(keys)]


def retrieval(rng: random.Random, n_records: int, value_words: int = 1) -> Retrieval:
    pairs = _records(rng, n_records, value_words)
    q = rng.randrange(n_records)
    body = " ; ".join(f"{k} {v}" for k, v in pairs)
    return Retrieval(f"records : {body} ; lookup {pairs[q][0]}", pairs[q][1], n_records)


def retrieval_set(seed: int, n: int, n_records: int, value_words: int = 1) -> list[Retrieval]:
    rng = random.Random(10_000 + seed)
    return [retrieval(rng, n_records, value_words) for _ in range(n)]


def retrieval_document(rng: random.Random, n_records: int, lookups: int, value_words: int = 1) -> str:
    """Records followed by `lookups` lookups of distinct keys (several per document: more copying signal per
    token; the first lookup has exactly the shape of an evaluation prompt)."""
    pairs = _records(rng, n_records, value_words)
    body = " ; ".join(f"{k} {v}" for k, v in pairs)
    asks = " ; ".join(f"lookup {pairs[i][0]} {pairs[i][1]}" for i in rng.sample(range(n_records),
                                                                               min(lookups, n_records)))
    return f"records : {body} ; {asks} ."


def copy_document(rng: random.Random, min_words: int = 6, max_words: int = 20) -> str:
    """A random sequence of key and value words followed by the same sequence (see the module docstring)."""
    words = [rng.choice(VALUE_WORDS) if rng.random() < 0.5 else rng.choice(KEY_WORDS)
             for _ in range(rng.randint(min_words, max_words))]
    return f"copy : {' '.join(words)} ; again : {' '.join(words)} ."


def is_copy_document(doc: str) -> bool:
    return doc.startswith("copy : ")


# The filler of the original passkey test (its five sentences, cycled).
FILLER = ["the grass is green .", "the sky is blue .", "the sun is yellow .", "here we go .",
          "there and back again ."]


def passkey(rng: random.Random, n_filler: int) -> Retrieval:
    """A pass key hidden among n_filler filler sentences (at a uniformly drawn position, ends included). Shorter
    than the original (which says the key twice and ends "the pass key is"), so a tiny model's training batches
    stay short."""
    key = str(rng.randrange(10_000, 100_000))
    at = rng.randint(0, n_filler)
    start = rng.randrange(len(FILLER))
    parts = [FILLER[(start + i) % len(FILLER)] for i in range(n_filler)]
    parts.insert(at, f"the pass key is {key} .")
    return Retrieval(f"passkey : {' '.join(parts)} what is the pass key ?", key, n_filler, "passkey")


def passkey_set(seed: int, n: int, n_filler: int) -> list[Retrieval]:
    rng = random.Random(20_000 + seed)
    return [passkey(rng, n_filler) for _ in range(n)]


def _closed_book_names(seed: int) -> set[str]:
    seen, unseen = entities(seed)
    return {e.name for e in seen + unseen}


def multidoc(rng: random.Random, n_docs: int, exclude: set[str]) -> Retrieval:
    """n_docs one-sentence documents, each about a different person (none in `exclude`: the closed-book names, so
    the answer cannot be recalled) and stating either the town or the trade, then the question that one uniformly
    drawn document answers."""
    towns = sorted({_word(rng, 2) for _ in range(40)})[:12]
    names: list[str] = []
    while len(names) < n_docs:
        w = _word(rng, 3)
        if w not in names and w not in exclude and w not in towns:
            names.append(w)
    docs, questions = [], []
    for i, name in enumerate(names):
        if rng.random() < 0.5:
            town = rng.choice(towns)
            docs.append(f"[{i + 1}] {name} lives in {town} .")
            questions.append((f"where does {name} live ?", town))
        else:
            trade = rng.choice(TRADES)
            docs.append(f"[{i + 1}] {name} works as a {trade} .")
            questions.append((f"what does {name} do ?", trade))
    question, answer = questions[rng.randrange(n_docs)]
    return Retrieval(f"documents : {' '.join(docs)} question : {question} answer :", answer, n_docs, "multidoc")


def multidoc_set(seed: int, n: int, n_docs: int) -> list[Retrieval]:
    rng = random.Random(30_000 + seed)
    exclude = _closed_book_names(seed)
    return [multidoc(rng, n_docs, exclude) for _ in range(n)]


def builtin_corpus(seed: int = 0, n_retrieval: int = 2000, min_records: int = 2, max_records: int = 12,
                   qa_repeats: int = 6, lookups: int = 3, n_passkey: int | None = None,
                   n_multidoc: int | None = None, n_copy: int = 0, value_words: int = 1) -> list[str]:
    """Training documents (one per list entry): facts, their QA pairs (ambiguous names with both answers across
    documents), retrieval documents with min_records..max_records records and up to `lookups` lookups, passkey
    documents with 1..max(1, max_records // 3) filler sentences and multi-document questions over
    2..max(2, max_records // 3) documents; n_passkey and n_multidoc default to n_retrieval // 20 each. Those two
    are kept short and rare because a training batch costs its longest document: at the demo's settings they are
    ~40-55 tokens (record documents up to 38) and the demo's 900 steps see 13% more padded tokens than without.
    n_copy copy documents (default none) come from a generator of their own, so adding them changes no other
    document. value_words > 1: each record's value is that many words (the answer of a lookup then continues
    past its first word, which is what a compressed KV cache is asked for: engine.py samples the first word from
    the prefill's own logits)."""
    rng = random.Random(seed)
    seen, _ = entities(seed)
    docs: list[str] = []
    for _ in range(qa_repeats):
        for e in seen:
            docs.append(fact_text(e))
            docs.append(f"question : where does {e.name} live ? answer : {e.town} .")
            docs.append(f"question : what does {e.name} do ? answer : {e.trade} .")
    for _ in range(n_retrieval):
        docs.append(retrieval_document(rng, rng.randint(min_records, max_records), lookups, value_words))
    # Their own generator, so the facts and record documents above stay what they were before these were added.
    lrng = random.Random(40_000 + seed)
    for _ in range(n_retrieval // 20 if n_passkey is None else n_passkey):
        ex = passkey(lrng, lrng.randint(1, max(1, max_records // 3)))
        docs.append(f"{ex.prompt} {ex.answer} .")
    exclude = _closed_book_names(seed)
    for _ in range(n_retrieval // 20 if n_multidoc is None else n_multidoc):
        ex = multidoc(lrng, lrng.randint(2, max(2, max_records // 3)), exclude)
        docs.append(f"{ex.prompt} {ex.answer} .")
    crng = random.Random(50_000 + seed)
    docs.extend(copy_document(crng) for _ in range(n_copy))
    rng.shuffle(docs)
    return docs


# ------------------------------------------------------------------ long-context tasks for a pretrained model
# Passkey retrieval (a five-digit key hidden at a random depth in filler text, the test of Mohtashami & Jaggi 2023)
# and multi-key lookup (several named five-digit codes in filler, one asked), in plain English for a model such as
# Gemma; the built-in corpus's own tasks above are for the models trained here.
HAYSTACK_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
HAYSTACK_NAMES = ("Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Irene", "Jack", "Karen", "Leo",
         "Maria", "Nina", "Oscar", "Paul")


@dataclass(frozen=True)
class Example:
    """A long-context question for a pretrained model: right when the continuation starts with `answer`."""

    prompt: str
    answer: str


def haystack_passkeys(seed: int, n: int, fillers: int) -> list[Example]:
    """n passkey prompts of `fillers` filler lines each (about 27 Gemma tokens a line), the key at a random depth."""
    rng = random.Random(20_000 + seed)
    out = []
    for _ in range(n):
        key = str(rng.randint(10_000, 99_999))
        parts = [HAYSTACK_FILLER] * fillers
        parts.insert(rng.randint(0, fillers), f"The pass key is {key}. Remember it. {key} is the pass key. ")
        out.append(Example("There is an important piece of information hidden inside a lot of irrelevant text. Find "
                           "it and memorize it.\n\n" + "".join(parts) + "\nWhat is the pass key? The pass key is",
                           key))
    return out


def haystack_codes(seed: int, n: int, fillers: int, keys: int = 4) -> list[Example]:
    """n prompts with `keys` named codes hidden among `fillers` filler lines; one name is asked."""
    rng = random.Random(30_000 + seed)
    out = []
    for _ in range(n):
        names = rng.sample(HAYSTACK_NAMES, keys)
        codes = {name: str(rng.randint(10_000, 99_999)) for name in names}
        parts = [HAYSTACK_FILLER] * fillers
        for name in names:
            parts.insert(rng.randint(0, len(parts)), f"The secret code of {name} is {codes[name]}. ")
        ask = rng.choice(names)
        out.append(Example("Remember the secret codes hidden in the text below.\n\n" + "".join(parts) +
                           f"\nQuestion: What is the secret code of {ask}?\nAnswer: The secret code of {ask} is",
                           codes[ask]))
    return out
