"""The labeled dataset the guard trains on, its validation, and importers from public formats.

Praxon guard JSONL: one JSON object per line. Row i is the i-th line of the file, 0-based (blank lines count, and
are skipped); errors name the field as ``rows[i].<field>``.

    text      str, required, non-empty (<= MAX_TEXT_CHARS)
    role      "prompt" (user input) | "response" (assistant output), required
    unsafe    bool, required
    topics    list of unique topic ids "S1".."S11" (default []). On a safe row a topic means the row is *about* that
              topic at severity 0 (education, news, refusal). An unsafe row with [] has an unknown topic: its topic
              labels are not trained on.
    severity  null (unknown; default) | int 0..4 applied to every listed topic | {"S1": 3, ...} with keys among
              `topics` (a listed topic without a key is unknown). A safe row's severities must be 0; an unsafe row
              with known severities must have at least one >= 1.
    prompt    optional str, response rows only: the prompt the response answers (the response is judged with it)
    split     optional "train" | "validation" | "test"
    id, source  optional strings, kept for lineage.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from services.common.errors import FieldViolation, InvalidArgument
from services.moderation.taxonomy import MAX_SEVERITY, ROLES, TOPIC_INDEX

MAX_TEXT_CHARS = 20_000
SPLITS = ("train", "validation", "test")
_MAX_REPORTED = 20  # violations reported at once


@dataclass(frozen=True)
class GuardExample:
    text: str
    role: str
    unsafe: bool
    topics: tuple[str, ...] = ()
    severity: Mapping[str, int] = field(default_factory=dict)  # known per-topic severities
    split: str | None = None
    id: str | None = None
    source: str | None = None
    prompt: str | None = None   # response rows: the prompt it answers (context of the response's verdict)
    # Soft labels (a teacher's probabilities, written by a distilling guard training): when present they, not
    # `unsafe` / `topics`, are the training targets of P(unsafe) and of each topic (guard.Targets).
    unsafe_p: float | None = None
    topic_p: Mapping[str, float] | None = None

    @property
    def topics_known(self) -> bool:
        """False for an unsafe row with no topics (topic unknown: not a negative for any topic)."""
        return bool(self.topics) or not self.unsafe

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"text": self.text, "role": self.role, "unsafe": self.unsafe, "topics": list(self.topics),
                             "severity": dict(self.severity) if self.severity else None}
        for k in ("split", "id", "source", "prompt", "unsafe_p"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.topic_p is not None:
            d["topic_p"] = dict(self.topic_p)
        return d


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def validate_row(obj: Any, i: int) -> tuple[GuardExample | None, list[FieldViolation]]:
    """Validate one decoded row; returns (example or None, violations)."""
    p = f"rows[{i}]"
    vs: list[FieldViolation] = []
    if not isinstance(obj, dict):
        return None, [FieldViolation(p, "must be a JSON object")]
    text = obj.get("text")
    if not isinstance(text, str) or not text.strip():
        vs.append(FieldViolation(f"{p}.text", "must be a non-empty string"))
    elif len(text) > MAX_TEXT_CHARS:
        vs.append(FieldViolation(f"{p}.text", f"longer than {MAX_TEXT_CHARS} characters"))
    role = obj.get("role")
    if role not in ROLES:
        vs.append(FieldViolation(f"{p}.role", f"must be one of {list(ROLES)}"))
    unsafe = obj.get("unsafe")
    if not isinstance(unsafe, bool):
        vs.append(FieldViolation(f"{p}.unsafe", "must be true or false"))
    topics_raw = obj.get("topics", [])
    topics: list[str] = []
    if not isinstance(topics_raw, list):
        vs.append(FieldViolation(f"{p}.topics", "must be a list of topic ids"))
    else:
        for j, t in enumerate(topics_raw):
            if t not in TOPIC_INDEX:
                vs.append(FieldViolation(f"{p}.topics[{j}]", f"unknown topic {t!r}; expected one of S1..S11"))
            elif t in topics:
                vs.append(FieldViolation(f"{p}.topics[{j}]", f"duplicate topic {t}"))
            else:
                topics.append(t)
    sev_raw = obj.get("severity")
    severity: dict[str, int] = {}
    if sev_raw is None:
        pass
    elif _is_int(sev_raw):
        if not 0 <= sev_raw <= MAX_SEVERITY:
            vs.append(FieldViolation(f"{p}.severity", "must be between 0 and 4"))
        else:
            severity = {t: sev_raw for t in topics}
            if unsafe is False and sev_raw != 0:
                vs.append(FieldViolation(f"{p}.severity", "a safe row (unsafe=false) must have severity 0"))
            if unsafe is True and sev_raw == 0 and topics:
                vs.append(FieldViolation(f"{p}.severity", "an unsafe row needs a severity of at least 1"))
    elif isinstance(sev_raw, dict):
        for k, v in sev_raw.items():
            if k not in topics:
                vs.append(FieldViolation(f"{p}.severity.{k}", "key must be one of the row's topics"))
            elif not _is_int(v) or not 0 <= v <= MAX_SEVERITY:
                vs.append(FieldViolation(f"{p}.severity.{k}", "must be an integer between 0 and 4"))
            else:
                severity[k] = v
        if unsafe is False and any(v != 0 for v in severity.values()):
            vs.append(FieldViolation(f"{p}.severity", "a safe row (unsafe=false) must have severity 0"))
        if unsafe is True and severity and max(severity.values()) < 1:
            vs.append(FieldViolation(f"{p}.severity", "an unsafe row needs a severity of at least 1"))
    else:
        vs.append(FieldViolation(f"{p}.severity", "must be null, an integer 0..4 or an object {topic: level}"))
    split = obj.get("split")
    if split is not None and split not in SPLITS:
        vs.append(FieldViolation(f"{p}.split", f"must be one of {list(SPLITS)}"))
    for k in ("id", "source"):
        if obj.get(k) is not None and not isinstance(obj.get(k), str):
            vs.append(FieldViolation(f"{p}.{k}", "must be a string"))
    prompt = obj.get("prompt")
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            vs.append(FieldViolation(f"{p}.prompt", "must be a non-empty string"))
        elif len(prompt) > MAX_TEXT_CHARS:
            vs.append(FieldViolation(f"{p}.prompt", f"longer than {MAX_TEXT_CHARS} characters"))
        elif role != "response":
            vs.append(FieldViolation(f"{p}.prompt", "only a response row has a prompt (the one it answers)"))
    unsafe_p, topic_p = obj.get("unsafe_p"), obj.get("topic_p")
    if unsafe_p is not None and not _is_probability(unsafe_p):
        vs.append(FieldViolation(f"{p}.unsafe_p", "must be a probability (a number in [0, 1])"))
    if topic_p is not None:
        if not isinstance(topic_p, dict):
            vs.append(FieldViolation(f"{p}.topic_p", "must be an object {topic: probability}"))
        else:
            for k, v in topic_p.items():
                if k not in TOPIC_INDEX:
                    vs.append(FieldViolation(f"{p}.topic_p.{k}", f"unknown topic {k!r}; expected one of S1..S11"))
                elif not _is_probability(v):
                    vs.append(FieldViolation(f"{p}.topic_p.{k}", "must be a probability (a number in [0, 1])"))
    if vs:
        return None, vs
    return GuardExample(text=text, role=role, unsafe=unsafe, topics=tuple(topics), severity=severity,
                        split=split, id=obj.get("id"), source=obj.get("source"), prompt=prompt,
                        unsafe_p=None if unsafe_p is None else float(unsafe_p),
                        topic_p=None if topic_p is None else {k: float(v) for k, v in topic_p.items()}), []


def _is_probability(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 <= x <= 1.0


def _lines(text: str) -> list[str]:
    """JSONL lines: split on "\n" only (str.splitlines would also split inside strings holding U+0085, U+2028...)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln.removesuffix("\r") for ln in lines]


def parse_guard_jsonl(data: bytes | str, *, field_prefix: str = "") -> list[GuardExample]:
    """Parse and validate a praxon guard JSONL artifact. Raises InvalidArgument listing up to 20 violations,
    each naming ``rows[i].<field>`` (i = 0-based line index)."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidArgument(f"{field_prefix}rows", f"dataset is not valid UTF-8 (byte {e.start})") from None
    out: list[GuardExample] = []
    vs: list[FieldViolation] = []
    for i, line in enumerate(_lines(data)):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            vs.append(FieldViolation(f"rows[{i}]", f"invalid JSON: {e.msg} at column {e.colno}"))
            continue
        ex, row_vs = validate_row(obj, i)
        vs.extend(row_vs)
        if ex is not None:
            out.append(ex)
        if len(vs) >= _MAX_REPORTED:
            break
    if vs:
        vs = [FieldViolation(field_prefix + v.field, v.description) for v in vs[:_MAX_REPORTED]]
        raise InvalidArgument(violations=vs)
    if not out:
        raise InvalidArgument(f"{field_prefix}rows", "dataset has no rows")
    return out


def dump_guard_jsonl(rows: Iterable[GuardExample]) -> bytes:
    return "".join(json.dumps(r.to_json(), ensure_ascii=False, sort_keys=True) + "\n" for r in rows).encode()


PACKAGED_DATASETS = {
    # hand-written, non-operational template rows (data/make_seed.py)
    "seed": "guard_seed.jsonl",
    # HarmBench and Do-Not-Answer requests, hand-written benign look-alikes, Gemma 3 270M's replies, split by source
    # request (data/make_gemma_pairs.py)
    "real_requests": "gemma_pairs.jsonl",
}


def load_packaged_dataset(name: str = "seed") -> list[GuardExample]:
    """A labeled set shipped in services/moderation/data (PACKAGED_DATASETS)."""
    data = resources.files("services.moderation.data").joinpath(PACKAGED_DATASETS[name]).read_bytes()
    return parse_guard_jsonl(data)


def load_seed_dataset() -> list[GuardExample]:
    """The packaged hand-written, non-operational seed set (services/moderation/data/guard_seed.jsonl)."""
    return load_packaged_dataset("seed")


# ---------------------------------------------------------------------------------------------- importers
# BingoGuard (github fanyin3639/bingoguard_initial; BingoGuardTest rows): {"prompt", "response", "category", "level"}
# where category is a short key ("violence", "sex_crime", ...) or the long topic name, and level is "level_3"/3.
BINGOGUARD_CATEGORIES: dict[str, str] = {
    "violence": "S1", "violent crime": "S1",
    "sex_crime": "S2", "sex-related crime": "S2",
    "sex_content": "S3", "sexual content": "S3",
    "profanity": "S4",
    "hate": "S5", "hate and discriminate": "S5", "hate and discrimination": "S5",
    "self_harm": "S6", "self-harm": "S6",
    "nonviolent": "S7", "non-violent crime": "S7", "non-violent illegal activity": "S7",
    "weapon": "S8",
    "privacy": "S9", "privacy invasion": "S9",
    "ip": "S10", "intellectual property": "S10", "intellectual property infringement": "S10",
    "misinformation": "S11",
}
# WildGuardMix (allenai/wildguardmix): {"prompt", "adversarial", "response", "prompt_harm_label",
# "response_refusal_label", "response_harm_label", "subcategory"}; labels "harmful"/"unharmful" (or null).
WILDGUARD_SUBCATEGORIES: dict[str, str | None] = {
    "violence_and_physical_harm": "S1",
    "sexual_content": "S3",
    "toxic_language_hate_speech": "S5",
    "social_stereotypes_and_unfair_discrimination": "S5",
    "mental_health_over-reliance_crisis": "S6",
    "fraud_assisting_illegal_activities": "S7",
    "cyberattack": "S7",
    "private_information_individual": "S9",
    "sensitive_information_organization_government": "S9",
    "copyright_violations": "S10",
    "causing_material_harm_by_disseminating_misinformation": "S11",
    "disseminating_false_or_misleading_information_encouraging_disinformation_campaigns": "S11",
    "defamation_encouraging_unethical_or_unsafe_actions": None,
    "others": None,
    "benign": None,
}


def _records(data: bytes | str | Iterable[Mapping[str, Any]]) -> list[tuple[int, Any]]:
    if isinstance(data, (bytes, str)):
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        out = []
        for i, line in enumerate(_lines(text)):
            if not line.strip():
                continue
            try:
                out.append((i, json.loads(line)))
            except json.JSONDecodeError as e:
                raise InvalidArgument(f"rows[{i}]", f"invalid JSON: {e.msg} at column {e.colno}") from None
        return out
    return list(enumerate(data))


def _level(v: Any) -> int | None:
    if _is_int(v):
        return v
    if isinstance(v, str):
        m = re.fullmatch(r"(?:level[_ ]?)?([0-4])", v.strip().lower())
        if m:
            return int(m.group(1))
    return None


def import_bingoguard(data: bytes | str | Iterable[Mapping[str, Any]], *, split: str | None = None
                      ) -> list[GuardExample]:
    """BingoGuard-style rows -> response rows with the topic and severity (level >= 1 is unsafe)."""
    out: list[GuardExample] = []
    for i, r in _records(data):
        if not isinstance(r, Mapping):
            raise InvalidArgument(f"rows[{i}]", "must be a JSON object")
        text = r.get("response")
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument(f"rows[{i}].response", "BingoGuard rows need a non-empty response")
        cat = r.get("category")
        topic = BINGOGUARD_CATEGORIES.get(str(cat).strip().lower()) if cat is not None else None
        if topic is None:
            raise InvalidArgument(f"rows[{i}].category", f"unknown BingoGuard category {cat!r}")
        lvl = _level(r.get("level", r.get("severity")))
        if lvl is None:
            raise InvalidArgument(f"rows[{i}].level", "expected level 0..4 (e.g. 'level_3' or 3)")
        pr = r.get("prompt")
        ex, vs = validate_row({"text": text, "role": "response", "unsafe": lvl >= 1, "topics": [topic],
                               "severity": lvl, "split": split, "source": "bingoguard",
                               "prompt": pr if isinstance(pr, str) and pr.strip() else None}, i)
        if vs:
            raise InvalidArgument(violations=vs)
        out.append(ex)
    return out


def import_wildguardmix(data: bytes | str | Iterable[Mapping[str, Any]], *, split: str | None = None
                        ) -> list[GuardExample]:
    """WildGuardMix rows -> a prompt row (prompt_harm_label) and, when there is a response with a harm label, a
    response row. Subcategories map to topics where one fits (else topic unknown); severity is unknown."""
    out: list[GuardExample] = []
    for i, r in _records(data):
        if not isinstance(r, Mapping):
            raise InvalidArgument(f"rows[{i}]", "must be a JSON object")
        sub = r.get("subcategory")
        if sub is not None and sub not in WILDGUARD_SUBCATEGORIES:
            raise InvalidArgument(f"rows[{i}].subcategory", f"unknown WildGuardMix subcategory {sub!r}")
        topic = WILDGUARD_SUBCATEGORIES.get(sub) if sub is not None else None
        for role, text_key, label_key in (("prompt", "prompt", "prompt_harm_label"),
                                          ("response", "response", "response_harm_label")):
            text, label = r.get(text_key), r.get(label_key)
            if not isinstance(text, str) or not text.strip() or label is None:
                continue  # missing text or label: that role is not labeled in this row
            if label not in ("harmful", "unharmful"):
                raise InvalidArgument(f"rows[{i}].{label_key}", "must be 'harmful', 'unharmful' or null")
            unsafe = label == "harmful"
            pr = r.get("prompt") if role == "response" else None
            ex, vs = validate_row({"text": text, "role": role, "unsafe": unsafe,
                                   "topics": [topic] if (unsafe and topic) else [], "severity": None,
                                   "split": split, "source": "wildguardmix",
                                   "prompt": pr if isinstance(pr, str) and pr.strip() else None}, i)
            if vs:
                raise InvalidArgument(violations=vs)
            out.append(ex)
    return out
