"""Writes qa_closed_book.jsonl: short closed-book questions with known answers at graded difficulty (easy, medium,
hard world facts) and questions about entities that do not exist ("fictional": every answer but a refusal is a
hallucination). One JSON object a line: {"id", "question", "answers" (accepted strings, lower-case match),
"difficulty", "topic"}. Deterministic (no randomness); run `python services/generation/data/make_qa.py` to rewrite.

`is_correct(answer, item)`: an accepted string occurs in the answer as whole words (case-insensitive); for a
fictional entity, the answer is correct only if it declines ("unknown", "does not exist", ...)."""
from __future__ import annotations

import json
import re
from pathlib import Path

OUT = Path(__file__).with_name("qa_closed_book.jsonl")

CAPITALS = {
    "easy": [("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Germany", "Berlin"), ("Spain", "Madrid"),
             ("the United Kingdom", "London"), ("Russia", "Moscow"), ("China", "Beijing"), ("Egypt", "Cairo"),
             ("Greece", "Athens"), ("Ireland", "Dublin"), ("Austria", "Vienna"), ("Portugal", "Lisbon"),
             ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Thailand", "Bangkok"), ("Cuba", "Havana"),
             ("South Korea", "Seoul"), ("Mexico", "Mexico City"), ("Argentina", "Buenos Aires")],
    "medium": [("Canada", "Ottawa"), ("Australia", "Canberra"), ("Brazil", "Brasilia"), ("Turkey", "Ankara"),
               ("Switzerland", "Bern"), ("Poland", "Warsaw"), ("Finland", "Helsinki"), ("Kenya", "Nairobi"),
               ("Peru", "Lima"), ("Chile", "Santiago"), ("Vietnam", "Hanoi"), ("Iran", "Tehran"),
               ("Iraq", "Baghdad"), ("Hungary", "Budapest"), ("Denmark", "Copenhagen"), ("Belgium", "Brussels"),
               ("the Netherlands", "Amsterdam"), ("Colombia", "Bogota"), ("Pakistan", "Islamabad"),
               ("New Zealand", "Wellington"), ("Morocco", "Rabat"), ("Nigeria", "Abuja"), ("Indonesia", "Jakarta"),
               ("the Philippines", "Manila"), ("Czechia", "Prague")],
    "hard": [("Kazakhstan", "Astana"), ("Mongolia", "Ulaanbaatar"), ("Bhutan", "Thimphu"), ("Burkina Faso",
             "Ouagadougou"), ("Kyrgyzstan", "Bishkek"), ("Tajikistan", "Dushanbe"), ("Mali", "Bamako"),
             ("Eritrea", "Asmara"), ("Laos", "Vientiane"), ("Paraguay", "Asuncion"), ("Bolivia", "Sucre"),
             ("Malawi", "Lilongwe"), ("Moldova", "Chisinau"), ("Suriname", "Paramaribo"), ("Vanuatu", "Port Vila"),
             ("Palau", "Ngerulmud"), ("Tuvalu", "Funafuti"), ("Djibouti", "Djibouti"), ("Benin", "Porto-Novo"),
             ("Myanmar", "Naypyidaw"), ("Sri Lanka", "Sri Jayawardenepura Kotte"), ("Montenegro", "Podgorica"),
             ("Lesotho", "Maseru"), ("Namibia", "Windhoek"), ("Turkmenistan", "Ashgabat")],
}
AUTHORS = {
    "easy": [("Romeo and Juliet", "Shakespeare"), ("Hamlet", "Shakespeare"), ("Harry Potter", "Rowling"),
             ("Don Quixote", "Cervantes"), ("War and Peace", "Tolstoy"), ("Oliver Twist", "Dickens"),
             ("Pride and Prejudice", "Austen"), ("Nineteen Eighty-Four", "Orwell")],
    "medium": [("The Old Man and the Sea", "Hemingway"), ("The Metamorphosis", "Kafka"), ("Faust", "Goethe"),
               ("Crime and Punishment", "Dostoevsky"), ("Moby-Dick", "Melville"), ("The Divine Comedy", "Dante"),
               ("Les Miserables", "Hugo"), ("The Odyssey", "Homer"), ("Frankenstein", "Shelley"),
               ("The Great Gatsby", "Fitzgerald")],
    "hard": [("Madame Bovary", "Flaubert"), ("The Magic Mountain", "Mann"), ("Dead Souls", "Gogol"),
             ("Middlemarch", "Eliot"), ("The Tale of Genji", "Murasaki"), ("Pedro Paramo", "Rulfo"),
             ("Things Fall Apart", "Achebe"), ("The Master and Margarita", "Bulgakov"),
             ("Buddenbrooks", "Mann"), ("Candide", "Voltaire")],
}
SYMBOLS = {
    "easy": [("oxygen", "O"), ("hydrogen", "H"), ("carbon", "C"), ("gold", "Au"), ("iron", "Fe"),
             ("sodium", "Na")],
    "medium": [("silver", "Ag"), ("potassium", "K"), ("lead", "Pb"), ("copper", "Cu"), ("mercury", "Hg"),
               ("tin", "Sn"), ("calcium", "Ca"), ("helium", "He")],
    "hard": [("tungsten", "W"), ("antimony", "Sb"), ("osmium", "Os"), ("rubidium", "Rb"), ("selenium", "Se"),
             ("yttrium", "Y"), ("ruthenium", "Ru"), ("gallium", "Ga")],
}
YEARS = {
    "easy": [("did World War II end", "1945"), ("did the Titanic sink", "1912"), ("did humans first land on the "
             "Moon", "1969"), ("did World War I begin", "1914"), ("did the Berlin Wall fall", "1989")],
    "medium": [("did Columbus first reach the Americas", "1492"), ("did the French Revolution begin", "1789"),
               ("was the United States Declaration of Independence signed", "1776"),
               ("did the Battle of Hastings take place", "1066"), ("did the Soviet Union dissolve", "1991"),
               ("was the Magna Carta sealed", "1215"), ("did the Russian Revolution take place", "1917")],
    "hard": [("was the Peace of Westphalia signed", "1648"), ("did the Battle of Lepanto take place", "1571"),
             ("was the Treaty of Tordesillas signed", "1494"), ("did the Congress of Vienna end", "1815"),
             ("did the Meiji Restoration begin", "1868"), ("did Constantinople fall to the Ottomans", "1453"),
             ("was the Edict of Nantes issued", "1598"), ("did the Taiping Rebellion begin", "1850")],
}
MISC = {
    "easy": [("What is the largest planet in the Solar System?", ["Jupiter"]),
             ("What is the chemical formula of water?", ["H2O"]),
             ("How many days are there in a week?", ["seven", "7"]),
             ("What colour is the sky on a clear day?", ["blue"]),
             ("What is the largest ocean on Earth?", ["Pacific"]),
             ("Which planet is known as the Red Planet?", ["Mars"]),
             ("How many legs does a spider have?", ["eight", "8"]),
             ("What language is spoken in Brazil?", ["Portuguese"]),
             ("Who painted the Mona Lisa?", ["Leonardo", "da Vinci"]),
             ("What is the freezing point of water in degrees Celsius?", ["0", "zero"])],
    "medium": [("What is the smallest planet in the Solar System?", ["Mercury"]),
               ("What is the longest river in Africa?", ["Nile"]),
               ("Who developed the theory of general relativity?", ["Einstein"]),
               ("What is the hardest natural substance?", ["diamond"]),
               ("Who composed the Ninth Symphony with the Ode to Joy?", ["Beethoven"]),
               ("What is the currency of Japan?", ["yen"]),
               ("How many bones are in the adult human body?", ["206"]),
               ("What gas do plants absorb from the air?", ["carbon dioxide", "CO2"]),
               ("What is the tallest mountain on Earth?", ["Everest"]),
               ("What language is spoken in Iran?", ["Persian", "Farsi"])],
    "hard": [("What is the second largest moon of Saturn?", ["Rhea"]),
             ("Who was the first emperor of the Ming dynasty?", ["Hongwu", "Zhu Yuanzhang"]),
             ("What is the currency of Ethiopia?", ["birr"]),
             ("Which element has atomic number 42?", ["molybdenum"]),
             ("What is the longest river in Europe?", ["Volga"]),
             ("Who wrote the opera The Magic Flute?", ["Mozart"]),
             ("What is the national language of Madagascar?", ["Malagasy"]),
             ("Who discovered the neutron?", ["Chadwick"]),
             ("What is the deepest lake in the world?", ["Baikal"]),
             ("Who was the first woman to win a Nobel Prize?", ["Curie"])],
}
# made-up places, people and works: any specific answer is a hallucination
FICTIONAL_PLACES = ["Veltrania", "Quorvesh", "Malindor", "Brastovia", "Zenthara", "Kolvenia", "Oskaria", "Prelune",
                    "Tavoria", "Gundaresh", "Ellistan", "Norvassa", "Drakmoria", "Sulvania", "Corvessa"]
FICTIONAL_WORKS = ["The Glass Orchard of Tembrin", "Seven Winters in Aldmoor", "The Clockmaker of Vashti",
                   "Songs of the Grey Meridian", "The Last Lantern of Quell", "A Harbour Called Morrow",
                   "The Salt Kings of Ebbridge", "Letters from Carrowind", "The Ninth Bell of Ostrava",
                   "Under the Copper Sky of Velm"]
FICTIONAL_PEOPLE = ["Aldric Venmoor", "Selka Durravin", "Tobias Quenwright", "Marisol Fenhallow", "Ivo Trastenberg",
                    "Lune Castavar", "Oren Balthwick", "Petra Vollhagen", "Cassian Morrowfield", "Edda Kornblatt"]
DECLINE = ["unknown", "does not exist", "doesn't exist", "no such", "not exist", "fictional", "not a real",
           "i don't know", "i do not know", "there is no"]


def items() -> list[dict]:
    out: list[dict] = []

    def add(q: str, answers: list[str], difficulty: str, topic: str) -> None:
        out.append({"id": f"q{len(out):04d}", "question": q, "answers": answers, "difficulty": difficulty,
                    "topic": topic})

    for d, rows in CAPITALS.items():
        for country, city in rows:
            add(f"What is the capital of {country}?", [city], d, "capital")
    for d, rows in AUTHORS.items():
        for book, author in rows:
            add(f"Who wrote {book}?", [author], d, "author")
    for d, rows in SYMBOLS.items():
        for element, sym in rows:
            add(f"What is the chemical symbol of {element}?", [sym], d, "symbol")
    for d, rows in YEARS.items():
        for event, year in rows:
            add(f"In what year {event}?", [year], d, "year")
    for d, rows in MISC.items():
        for q, answers in rows:
            add(q, answers, d, "misc")
    for place in FICTIONAL_PLACES:
        add(f"What is the capital of {place}?", [], "fictional", "capital")
        add(f"What language is spoken in {place}?", [], "fictional", "misc")
        add(f"In what year was {place} founded?", [], "fictional", "year")
    for work in FICTIONAL_WORKS:
        add(f"Who wrote {work}?", [], "fictional", "author")
    for person in FICTIONAL_PEOPLE:
        add(f"In what year was {person} born?", [], "fictional", "year")
        add(f"What is {person} famous for?", [], "fictional", "misc")
    return out


def is_correct(answer: str, item: dict) -> bool:
    a = answer.lower()
    if not item["answers"]:
        return any(d in a for d in DECLINE)
    return any(re.search(rf"(?<![a-z0-9]){re.escape(x.lower())}(?![a-z0-9])", a) for x in item["answers"])


def load(path: Path = OUT) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    rows = items()
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    by = {}
    for r in rows:
        by[r["difficulty"]] = by.get(r["difficulty"], 0) + 1
    print(f"wrote {len(rows)} questions to {OUT}: {by}")


if __name__ == "__main__":
    main()
