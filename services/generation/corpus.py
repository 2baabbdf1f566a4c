"""The built-in generated corpus: text a tiny model trained from scratch on two CPU cores can really learn, with
tasks whose answers are known.

- Facts (closed-book QA). Generated entities with a home town and a trade: "fact : the person vomira lives in
  tulsek and works as a baker ." Questions "question : where does vomira live ? answer : tulsek". Some names are
  *ambiguous* (two entities share a name with different facts: either answer is right, the model cannot know which
  one is meant), some are *unseen* (never in the training text: no answer can be known).
- Retrieval (long context). Key-value records followed by lookups: "records : kafo bam ; rimo dus ; ... ; lookup
  kafo bam". The value must be copied from the context: the word after the earlier occurrence of the key (an
  induction-head task, which a two-layer model can express; a format with a word between key and value would need a
  two-hop composition. The one recorded CPU run, 4000 steps at width 64, did not learn it yet: see
  benchmarks/generation/kv_retrieval.py). Keys (64) and values (64) are words that the
  BPE tokenizer keeps whole. The prompt grows with the number of records, so KV-cache compression is tested on a
  task with one known right answer.

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
VALUE_WORDS = [c1 + v + c2 for c1 in "bdgk" for v in "aeiou" for c2 in "mnrs"][:64]


@dataclass(frozen=True)
class Retrieval:
    prompt: str     # "records : k1 v1 ; k2 v2 ; ... ; lookup k"
    answer: str     # the value recorded for k (one word)
    n_records: int


def _records(rng: random.Random, n_records: int) -> list[tuple[str, str]]:
    keys = rng.sample([a + b for a in KEY_SYLLABLES for b in KEY_SYLLABLES], n_records)
    return [(k, rng.choice(VALUE_WORDS)) for k in keys]


def retrieval(rng: random.Random, n_records: int) -> Retrieval:
    pairs = _records(rng, n_records)
    q = rng.randrange(n_records)
    body = " ; ".join(f"{k} {v}" for k, v in pairs)
    return Retrieval(f"records : {body} ; lookup {pairs[q][0]}", pairs[q][1], n_records)


def retrieval_set(seed: int, n: int, n_records: int) -> list[Retrieval]:
    rng = random.Random(10_000 + seed)
    return [retrieval(rng, n_records) for _ in range(n)]


def retrieval_document(rng: random.Random, n_records: int, lookups: int) -> str:
    """Records followed by `lookups` lookups of distinct keys (several per document: more copying signal per
    token; the first lookup has exactly the shape of an evaluation prompt)."""
    pairs = _records(rng, n_records)
    body = " ; ".join(f"{k} {v}" for k, v in pairs)
    asks = " ; ".join(f"lookup {pairs[i][0]} {pairs[i][1]}" for i in rng.sample(range(n_records),
                                                                               min(lookups, n_records)))
    return f"records : {body} ; {asks} ."


def builtin_corpus(seed: int = 0, n_retrieval: int = 2000, min_records: int = 2, max_records: int = 12,
                   qa_repeats: int = 6, lookups: int = 3) -> list[str]:
    """Training documents (one per list entry): facts, their QA pairs (ambiguous names with both answers across
    documents), and retrieval documents with min_records..max_records records and up to `lookups` lookups."""
    rng = random.Random(seed)
    seen, _ = entities(seed)
    docs: list[str] = []
    for _ in range(qa_repeats):
        for e in seen:
            docs.append(fact_text(e))
            docs.append(f"question : where does {e.name} live ? answer : {e.town} .")
            docs.append(f"question : what does {e.name} do ? answer : {e.trade} .")
    for _ in range(n_retrieval):
        docs.append(retrieval_document(rng, rng.randint(min_records, max_records), lookups))
    rng.shuffle(docs)
    return docs
