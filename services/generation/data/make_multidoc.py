"""Writes multidoc_qa.jsonl: a multi-document QA set over generated documents about invented entities (so a model
cannot answer from memory), for the RAG benchmark (benchmarks/generation/rag.py).

Each record: {"id", "kind", "question", "answer", "documents": [{"id", "title", "text"}], "gold": [document ids]}.
- kind "single": the answer is in one document; distractors are near-duplicates of it (a name one letter away with
  another value) and documents about the same entity that state other facts (with other place names in them).
- kind "two_hop": the answer is spread over two documents (X was born in town T; T lies in province P -> "In which
  province was X born?"); distractors: the same bridge pattern for other towns and near-duplicate people.
Every question's documents go into one shared collection, so retrieval also competes against the other questions'
documents. Deterministic: `python services/generation/data/make_multidoc.py [--n 48] [--seed 0]`."""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z"]
VOWELS = ["a", "e", "i", "o", "u"]
CODAS = ["n", "r", "l", "s", "m", "k"]
JOBS = ["glassblower", "ferry pilot", "clockmaker", "beekeeper", "cartographer", "stonemason", "weaver", "brewer"]


def word(rng: random.Random, syllables: int) -> str:
    """A pronounceable invented word: consonant-vowel syllables, the last one closed (Tavel, Morindar)."""
    body = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(syllables))
    return (body + rng.choice(CODAS)).capitalize()


def near(rng: random.Random, name: str) -> str:
    """A name one letter away (a vowel swapped)."""
    idx = [i for i, c in enumerate(name) if c in "aeiou"]
    i = rng.choice(idx)
    repl = rng.choice([v for v in "aeiou" if v != name[i]])
    return name[:i] + repl + name[i + 1:]


def make(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    used: set[str] = set()

    def fresh(syl: int) -> str:
        while True:
            w = word(rng, syl)
            if w not in used:
                used.add(w)
                return w
    out = []
    for q in range(n):
        person = f"{fresh(2)} {fresh(2)}"
        first, last = person.split()
        twin = f"{near(rng, first)} {last}"
        town, town2, town3 = fresh(2), fresh(2), fresh(2)
        prov, prov2 = fresh(3), fresh(3)
        job = rng.choice(JOBS)
        docs = []

        def add(text: str, title: str, q: int = q, docs: list = docs) -> str:
            did = f"q{q:03d}-d{len(docs)}"
            docs.append({"id": did, "title": title, "text": text})
            return did
        if q % 2 == 0:
            gold = [add(f"{person} was born in the town of {town} and grew up near the harbour.", person)]
            add(f"{twin} was born in the town of {town2} and grew up near the harbour.", twin)  # near-duplicate
            add(f"{person} works as a {job} in {town3}, where the workshop is open on weekdays.", person)
            add(f"{town} has a market square and a stone bridge over the river.", town)
            out.append({"id": f"q{q:03d}", "kind": "single", "question": f"In which town was {person} born?",
                        "answer": town, "documents": docs, "gold": gold})
        else:
            gold = [add(f"{person} was born in the town of {town}.", person),
                    add(f"The town of {town} lies in the province of {prov}.", town)]
            add(f"The town of {town2} lies in the province of {prov2}.", town2)          # the same pattern, elsewhere
            add(f"{twin} was born in the town of {town2}.", twin)                       # near-duplicate person
            add(f"{person} works as a {job} in the town of {town3}.", person)
            out.append({"id": f"q{q:03d}", "kind": "two_hop", "question": f"In which province was {person} born?",
                        "answer": prov, "documents": docs, "gold": gold})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).with_name("multidoc_qa.jsonl")))
    a = ap.parse_args()
    rows = make(a.n, a.seed)
    with open(a.out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"wrote {len(rows)} questions, {sum(len(r['documents']) for r in rows)} documents to {a.out}")


if __name__ == "__main__":
    main()
