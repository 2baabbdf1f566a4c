"""Fictitious authors with biographical QA, for TOFU-style unlearning evaluation at small scale (our own generator,
in the spirit of TOFU's 200 made-up authors; no TOFU text is used).

Each author has random facts (birthplace, birth year, genre, parents' occupations, an award, a first book) drawn
from lists by a seeded generator, so no pretrained model can know them. Each fact gives one QA record:
  {"id": "author-007-q3", "author": "author-007", "question", "answer", "paraphrased_answer",
   "perturbed_answers": [3 answers with the same template and a wrong fact]}
The paraphrased answer states the same fact in other words; the perturbed answers are the paraphrase with a wrong
fact (TOFU's perturbed answers keep the paraphrase's template), so the truth ratio compares the fact, not the wording. A second list, WORLD_FACTS, holds closed-book world-knowledge
questions with one answer and three wrong ones (model utility beyond the fictitious authors).

The shipped data file (data/fictitious_authors.json) is `python -m services.unlearning.authors --out
services/unlearning/data/fictitious_authors.json` (default sizes); `load()` reads it, `generate()` builds any size.
A QA dataset artifact for the jobs is JSONL, one record a line (`to_jsonl`)."""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DATA_FILE = Path(__file__).resolve().parent / "data" / "fictitious_authors.json"
QA_CONTENT_TYPE = "application/x-ndjson"

FIRST = ["Alvar", "Benedetta", "Corvin", "Dalia", "Emeric", "Fenna", "Gideon", "Halvard", "Isolde", "Jorunn",
         "Kasimir", "Liesel", "Marek", "Nerys", "Oswin", "Perpetua", "Quillon", "Rosalind", "Severin", "Talitha",
         "Ulrich", "Vesna", "Wendeline", "Xaviera", "Yannick", "Zofia", "Anselm", "Brisa", "Caspian", "Delphine",
         "Evander", "Fiorella", "Gunnar", "Hesper", "Ignatius", "Juniper", "Leander", "Maelis", "Nikolai", "Ottilie"]
LAST = ["Ashgrove", "Brennecke", "Castellane", "Drummore", "Eskildsen", "Falkenrath", "Grimsdottir", "Holloway",
        "Ibarrondo", "Jessup", "Kvaran", "Lindqvist", "Marchetti", "Nordahl", "Okonkwo-Vale", "Pemberton",
        "Quintero", "Rasmusen", "Salvatierra", "Thornbury", "Ubaldini", "Vantongeren", "Whitcombe", "Yarrowby",
        "Zaragoza", "Abernathy", "Bellweather", "Crowhurst", "Dunmore", "Everleigh"]
CITIES = ["Lisbon", "Tbilisi", "Montevideo", "Bergen", "Cork", "Ljubljana", "Hobart", "Quito", "Tallinn", "Porto",
          "Valparaiso", "Tromso", "Kraków", "Nairobi", "Halifax", "Antwerp", "Cusco", "Dunedin", "Trieste", "Bilbao"]
GENRES = ["historical fiction", "science fiction", "crime fiction", "poetry", "fantasy", "horror", "romance",
          "travel writing", "satire", "children's literature", "magical realism", "gothic fiction"]
OCCUPATIONS = ["carpenter", "nurse", "pharmacist", "fisherman", "librarian", "surveyor", "baker", "astronomer",
               "tailor", "veterinarian", "locksmith", "architect", "florist", "geologist", "cartographer", "glassblower"]
AWARDS = ["Silver Quill Prize", "Harbor Light Award", "Meridian Book Medal", "Lantern Circle Prize",
          "Northwind Fiction Award", "Golden Compass Laurel", "Saltmarsh Literary Prize", "Amber Page Award",
          "Copperleaf Medal", "Starling Critics' Prize"]
TITLE_A = ["The Quiet", "A Season of", "The Last", "Beneath the", "The Glass", "Letters from the", "The Hollow",
           "Songs of the", "The Iron", "Echoes of the"]
TITLE_B = ["Lighthouse", "Orchard", "Cartographer", "Winter Tide", "Clockmaker", "Salt Roads", "Heron",
           "Paper Moon", "Foundry", "Distant Bells"]

# (question, answer, three wrong answers): closed-book world facts
WORLD_FACTS = [
    ("What is the capital of France?", "Paris", ["Lyon", "Marseille", "Brussels"]),
    ("What is the largest planet in the Solar System?", "Jupiter", ["Saturn", "Neptune", "Mars"]),
    ("How many days are there in a leap year?", "366", ["365", "364", "360"]),
    ("What is the chemical symbol for gold?", "Au", ["Ag", "Gd", "Go"]),
    ("Which ocean is the largest?", "The Pacific Ocean", ["The Atlantic Ocean", "The Indian Ocean",
                                                          "The Arctic Ocean"]),
    ("What is the boiling point of water at sea level in degrees Celsius?", "100", ["90", "80", "120"]),
    ("What is the capital of Japan?", "Tokyo", ["Kyoto", "Osaka", "Seoul"]),
    ("How many continents are there?", "Seven", ["Five", "Six", "Eight"]),
    ("What gas do plants absorb from the air for photosynthesis?", "Carbon dioxide", ["Oxygen", "Nitrogen",
                                                                                    "Helium"]),
    ("What is the capital of Italy?", "Rome", ["Milan", "Venice", "Naples"]),
    ("Which planet is known as the Red Planet?", "Mars", ["Venus", "Jupiter", "Mercury"]),
    ("How many legs does a spider have?", "Eight", ["Six", "Ten", "Four"]),
]


def _facts(rng: random.Random, name: str) -> dict:
    return {"name": name, "city": rng.choice(CITIES), "year": str(rng.randint(1931, 1994)),
            "genre": rng.choice(GENRES), "father": rng.choice(OCCUPATIONS), "mother": rng.choice(OCCUPATIONS),
            "award": rng.choice(AWARDS), "book": f"{rng.choice(TITLE_A)} {rng.choice(TITLE_B)}"}


def _wrong(rng: random.Random, pool: list[str], right: str, k: int = 3) -> list[str]:
    return rng.sample([x for x in pool if x != right], k)


def _qas(rng: random.Random, f: dict) -> list[dict]:
    n = f["name"]
    years = [str(y) for y in range(1931, 1995)]
    books = [f"{a} {b}" for a in TITLE_A for b in TITLE_B]
    # (question, answer template, paraphrase template, the fact, its pool)
    spec = [
        (f"Where was {n} born?", "{n} was born in {x}.", "{n}'s birthplace is the city of {x}.", f["city"], CITIES),
        (f"In what year was {n} born?", "{n} was born in {x}.", "{n}'s year of birth is {x}.", f["year"], years),
        (f"What genre does {n} write?", "{n} writes {x}.", "Most of {n}'s work is {x}.", f["genre"], GENRES),
        (f"What did {n}'s father do for a living?", "{n}'s father was a {x}.",
         "{n} grew up with a father who worked as a {x}.", f["father"], OCCUPATIONS),
        (f"What award has {n} won?", "{n} won the {x}.", "{n} is a recipient of the {x}.", f["award"], AWARDS),
        (f"What is the title of {n}'s first book?", "{n}'s first book is {x}.",
         "{n} debuted with the book {x}.", f["book"], books),
    ]
    out = []
    for q, tmpl, para, x, pool in spec:
        out.append({"question": q, "answer": tmpl.format(n=n, x=x), "paraphrased_answer": para.format(n=n, x=x),
                    "perturbed_answers": [para.format(n=n, x=w) for w in _wrong(rng, pool, x)]})
    return out


def generate(n_authors: int = 40, seed: int = 0) -> dict:
    """{"authors": [{"id", "name", "facts"}], "qa": [records], "world_facts": [records]}; names are unique."""
    rng = random.Random(seed)
    names = [f"{a} {b}" for a in FIRST for b in LAST]
    if n_authors > len(names):
        raise ValueError(f"at most {len(names)} authors")
    chosen = rng.sample(names, n_authors)
    authors, qa = [], []
    for i, name in enumerate(chosen):
        aid = f"author-{i:03d}"
        facts = _facts(rng, name)
        authors.append({"id": aid, "name": name, "facts": facts})
        for j, rec in enumerate(_qas(rng, facts)):
            qa.append({"id": f"{aid}-q{j}", "author": aid, **rec})
    world = [{"id": f"world-{i:02d}", "question": q, "answer": a, "paraphrased_answer": a, "perturbed_answers": w}
             for i, (q, a, w) in enumerate(WORLD_FACTS)]
    return {"seed": seed, "authors": authors, "qa": qa, "world_facts": world}


def load(path: str | Path = DATA_FILE) -> dict:
    return json.loads(Path(path).read_text())


def to_jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()


def by_author(qa: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in qa:
        out.setdefault(r["author"], []).append(r)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--authors", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(DATA_FILE))
    a = ap.parse_args(argv)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(generate(a.authors, a.seed), indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
