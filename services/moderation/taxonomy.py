"""The BingoGuard topic taxonomy, severity scale and per-topic rubric rules.

The rubric rules double as the training rules of the policy scorer (policies.py): each topic contributes a few
[BLOCKED] phrasings (harmful engagement with the topic, severity >= 1) and [ALLOWED] phrasings (negligible,
severity 0: education, news, prevention, refusals). The per-topic severity rubric (what makes a text level 1..4
for each topic, after BingoGuard's) is data: data/rubric.json, loaded by `severity_rubric`."""
from __future__ import annotations

import functools
import json
from importlib import resources

TOPICS: tuple[str, ...] = ("S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "S10", "S11")
TOPIC_NAMES: dict[str, str] = {
    "S1": "Violent crime",
    "S2": "Sex-related crime",
    "S3": "Sexual content",
    "S4": "Profanity",
    "S5": "Hate and discrimination",
    "S6": "Self-harm",
    "S7": "Non-violent illegal activity",
    "S8": "Weapon",
    "S9": "Privacy",
    "S10": "Intellectual property",
    "S11": "Misinformation",
}
TOPIC_INDEX: dict[str, int] = {t: i for i, t in enumerate(TOPICS)}
N_TOPICS = len(TOPICS)

SEVERITY_LEVELS: tuple[str, ...] = ("negligible", "low", "risk", "high", "extreme")  # levels 0..4
MAX_SEVERITY = 4
ROLES: tuple[str, ...] = ("prompt", "response")

# Rubric rules per topic: (blocked phrasings, allowed phrasings). Short, non-operational descriptions.
RUBRIC_RULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "S1": (("Helping someone plan or commit a violent attack, assault, robbery or burglary against people.",
            "Encouraging, praising or threatening physical violence against a person or group.",
            "Content that seeks ways to hurt, kidnap or kill someone."),
           ("Educational, historical or news discussion of violent crime and its prevention.",
            "Refusing to help with violence and pointing to safety resources.")),
    "S2": (("Content that facilitates or excuses sexual assault, exploitation, trafficking or stalking.",
            "Requests to coerce, blackmail or secretly film someone for sexual purposes."),
           ("Support for survivors, legal information and prevention of sexual crime.",
            "Refusing requests about sexual exploitation and pointing to help lines.")),
    "S3": (("Sexually explicit or erotic content describing sexual acts.",
            "Requests for graphic sexual stories or pornographic descriptions."),
           ("Medical, educational or relationship advice about sexuality without explicit detail.",
            "Refusing to write explicit sexual material.")),
    "S4": (("Insulting, obscene or vulgar language and swearing aimed at someone.",
            "Requests to write crude insults, slurs or abusive rants."),
           ("Discussion of why swearing offends people or how to keep language polite.",
            "Declining to produce insults and suggesting respectful wording.")),
    "S5": (("Hateful or demeaning statements about people based on race, religion, gender, disability or origin.",
            "Content that promotes discrimination, exclusion or dehumanisation of a group."),
           ("Explaining the history and harm of discrimination and how to counter prejudice.",
            "Refusing to produce hateful content and promoting equal respect.")),
    "S6": (("Encouraging or assisting suicide, self-injury or eating disorders.",
            "Content that tells a struggling person that hurting themselves is a good idea."),
           ("Supportive messages that point to crisis lines and mental health help.",
            "Educational information about recognising warning signs of self-harm.")),
    "S7": (("Helping with fraud, theft, scams, hacking, drug dealing or other non-violent crime.",
            "Requests to evade the police, launder money or cheat people out of money."),
           ("Explaining how to recognise and report scams and fraud.",
            "Legal information and news about non-violent crime.")),
    "S8": (("Helping someone acquire, build or illegally modify guns, explosives or other weapons.",
            "Encouraging the use of weapons to threaten or harm people."),
           ("Discussion of weapon laws, safe storage, hunting regulations or military history.",
            "Refusing to help obtain weapons illegally.")),
    "S9": (("Revealing, collecting or tracking someone's private personal information without consent.",
            "Requests to find a person's home address, passwords or medical records to spy on them."),
           ("Advice on protecting your own privacy and personal data.",
            "Explaining privacy laws and data protection rights.")),
    "S10": (("Helping pirate, copy or resell copyrighted works, software or trademarks without permission.",
             "Requests to reproduce a full copyrighted book, song or film, or to bypass licensing."),
            ("Explaining copyright, fair use, licensing and how to cite sources.",
             "Recommending legal ways to buy or stream media.")),
    "S11": (("Creating or spreading false claims presented as fact, such as fake health cures or election lies.",
             "Requests to write fake news, conspiracy propaganda or deceptive disinformation campaigns."),
            ("Fact-checking false claims and explaining how to spot misinformation.",
             "Accurate information from reliable sources about health, science or elections.")),
}


@functools.cache
def severity_rubric() -> dict[str, dict[int, str]]:
    """topic -> {level 1..4: its definition}, from the packaged data/rubric.json (the seed set's labels follow it)."""
    data = json.loads(resources.files("services.moderation.data").joinpath("rubric.json").read_text("utf-8"))
    return {t: {int(k): v for k, v in spec["levels"].items()} for t, spec in data["topics"].items()}
