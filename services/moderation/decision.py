"""Moderation decisions under per-tenant, per-topic severity thresholds, over sentence windows.

A text is scored window by window: split into sentences (text.py), window i = sentences[i-W+1 .. i] (W = 2 by
default; the first window is the first sentence alone). The unary verdict is defined as the aggregate over these
windows, in order, which is exactly what the streaming check (stream.py) computes as sentences complete, so the final
streaming answer equals the unary answer bit for bit.

Per window: topic t is present when P(topic t) >= topic_threshold; its level is the guard's severity (#{k : P(>= k)
>= .5}); the window blocks topic t when t is present and level >= thresholds[t] (threshold k blocks every level >= k;
threshold 0 blocks any content on the topic). A flagged window (P(unsafe) >= unsafe_threshold) with no present topic
blocks as "unspecified" when block_unspecified is set. The text is blocked iff some window blocks; every decision is
monotone in the thresholds (lowering a threshold never unblocks anything).

Aggregates: unsafe score, topic scores and P(severity >= k) are maxima over windows; a topic's severity is the max
of its level over the windows where it is present (0 when absent). safe_offset: the character offset up to which
the text is safe to show -- the start of the sentence that completed the first blocking window, else len(text)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from services.common.errors import InvalidArgument
from services.moderation.guard import N_LEVELS, GuardModel, validate_roles
from services.moderation.schema import MAX_TEXT_CHARS
from services.moderation.taxonomy import (
    MAX_SEVERITY,
    N_TOPICS,
    TOPIC_INDEX,
    TOPIC_NAMES,
    TOPICS,
)
from services.moderation.text import (
    DEFAULT_WINDOW_SENTENCES,
    Span,
    split_sentences,
    window_span,
)

DEFAULT_LEVEL = 1  # block "low" and above unless the tenant says otherwise
UNSPECIFIED = "unspecified"


@dataclass(frozen=True)
class Thresholds:
    """A tenant's decision settings. levels[t] in 0..4 for topic TOPICS[t]."""

    levels: tuple[int, ...] = (DEFAULT_LEVEL,) * N_TOPICS
    unsafe_threshold: float = 0.5
    topic_threshold: float = 0.5
    block_unspecified: bool = True

    @classmethod
    def build(cls, levels: Mapping[str, Any] | None = None, *, default_level: Any = DEFAULT_LEVEL,
              unsafe_threshold: Any = 0.5, topic_threshold: Any = 0.5, block_unspecified: bool = True,
              field: str = "thresholds") -> Thresholds:
        """Validate and build; topics missing from `levels` get `default_level`. Raises InvalidArgument naming
        e.g. "thresholds.levels.S3" or "thresholds.unsafe_threshold"."""
        def level(v: Any, f: str) -> int:
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_SEVERITY:
                raise InvalidArgument(f, f"severity threshold must be an integer between 0 and {MAX_SEVERITY}")
            return v

        d = level(default_level, f"{field}.default_level")
        out = [d] * N_TOPICS
        for k, v in (levels or {}).items():
            if k not in TOPIC_INDEX:
                raise InvalidArgument(f"{field}.levels.{k}", "unknown topic; expected one of S1..S11")
            out[TOPIC_INDEX[k]] = level(v, f"{field}.levels.{k}")
        for name, v in (("unsafe_threshold", unsafe_threshold), ("topic_threshold", topic_threshold)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < float(v) < 1.0:
                raise InvalidArgument(f"{field}.{name}", "must be a probability strictly between 0 and 1")
        return cls(tuple(out), float(unsafe_threshold), float(topic_threshold), bool(block_unspecified))


@dataclass(frozen=True)
class TopicResult:
    topic: str
    name: str
    score: float                     # max over windows of P(topic)
    present: bool
    severity: int                    # 0..4 (0 when absent)
    severity_ge: tuple[float, ...]   # max over windows of P(severity >= k), k = 1..4; non-increasing
    blocked: bool


@dataclass(frozen=True)
class ModerationResult:
    role: str
    flagged: bool                    # unsafe_score >= unsafe_threshold
    unsafe_score: float
    blocked: bool                    # the decision under the tenant's thresholds
    blocking_topics: tuple[str, ...]  # topics (or "unspecified") that block in some window
    top_topic: str | None            # highest-scoring present topic
    topics: tuple[TopicResult, ...]
    safe_offset: int
    evidence: Span | None            # window of the first block, else the top topic's best window
    model_version: str
    n_windows: int = 0


@dataclass
class WindowAggregator:
    """Folds window predictions, in order, into a ModerationResult (shared by unary and streaming)."""

    thresholds: Thresholds
    unsafe: float = 0.0
    topic: np.ndarray = field(default_factory=lambda: np.zeros(N_TOPICS))
    sev_ge: np.ndarray = field(default_factory=lambda: np.zeros((N_TOPICS, N_LEVELS)))
    level: np.ndarray = field(default_factory=lambda: -np.ones(N_TOPICS, dtype=np.int64))
    topic_best: list[Span | None] = field(default_factory=lambda: [None] * N_TOPICS)
    blocking: set[str] = field(default_factory=set)
    first_block: Span | None = None       # the sentence whose window blocked first
    first_block_window: Span | None = None
    n: int = 0

    def add(self, pred: Mapping[str, np.ndarray], window: Span, sentence: Span) -> bool:
        """Add one window's prediction (a row of GuardModel.predict_from_features). Returns whether it blocks."""
        th = self.thresholds
        u, tp, sge, sev = float(pred["unsafe"]), pred["topics"], pred["severity_ge"], pred["severity"]
        present = tp >= th.topic_threshold
        blocks = []
        for t in range(N_TOPICS):
            if tp[t] > self.topic[t]:
                self.topic_best[t] = window
            if present[t]:
                self.level[t] = max(int(self.level[t]), int(sev[t]))
                if int(sev[t]) >= th.levels[t]:
                    blocks.append(TOPICS[t])
        if u >= th.unsafe_threshold and not present.any() and th.block_unspecified:
            blocks.append(UNSPECIFIED)
        self.unsafe = max(self.unsafe, u)
        self.topic = np.maximum(self.topic, tp)
        self.sev_ge = np.maximum(self.sev_ge, sge)
        self.n += 1
        if blocks:
            self.blocking.update(blocks)
            if self.first_block is None:
                self.first_block, self.first_block_window = sentence, window
        return bool(blocks)

    @property
    def blocked(self) -> bool:
        return bool(self.blocking)

    def result(self, role: str, text_len: int, model_version: str, *, final: bool = True,
               scored_until: int = 0) -> ModerationResult:
        th = self.thresholds
        present = self.topic >= th.topic_threshold
        topics = []
        for t in range(N_TOPICS):
            lvl = int(self.level[t]) if present[t] else 0
            topics.append(TopicResult(TOPICS[t], TOPIC_NAMES[TOPICS[t]], float(self.topic[t]), bool(present[t]),
                                      lvl, tuple(float(x) for x in self.sev_ge[t]), TOPICS[t] in self.blocking))
        top = None
        if present.any():
            top = TOPICS[int(np.argmax(np.where(present, self.topic, -1.0)))]
        if self.first_block is not None:
            safe, evidence = self.first_block.start, self.first_block_window
        else:
            safe = text_len if final else scored_until
            evidence = self.topic_best[TOPIC_INDEX[top]] if top else None
        order = {t: i for i, t in enumerate((*TOPICS, UNSPECIFIED))}
        return ModerationResult(role=role, flagged=self.unsafe >= th.unsafe_threshold, unsafe_score=self.unsafe,
                                blocked=self.blocked, blocking_topics=tuple(sorted(self.blocking, key=order.get)),
                                top_topic=top, topics=tuple(topics), safe_offset=safe, evidence=evidence,
                                model_version=model_version, n_windows=self.n)


def validate_text(text: Any, field: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(field, "must be a non-empty text")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidArgument(field, f"longer than {MAX_TEXT_CHARS} characters")
    return text


def text_windows(text: str, window: int = DEFAULT_WINDOW_SENTENCES) -> list[tuple[Span, Span]]:
    """[(window span, its last sentence span)] in order."""
    sents = split_sentences(text)
    return [(window_span(sents, i, window), sents[i]) for i in range(len(sents))]


def moderate_batch(guard: GuardModel, texts: Sequence[str], roles: Sequence[str], thresholds: Thresholds,
                   *, window: int = DEFAULT_WINDOW_SENTENCES) -> list[ModerationResult]:
    """Moderate many texts at once (the server's dynamic batcher calls this). Identical windows across the batch
    are scored once. Raises InvalidArgument for texts[i] empty/too long or roles[i] unknown."""
    for i, t in enumerate(texts):
        validate_text(t, f"texts[{i}]")
    validate_roles(roles, len(texts))
    per_item = [text_windows(t, window) for t in texts]
    keys: dict[tuple[str, str], int] = {}
    for t, r, wins in zip(texts, roles, per_item):
        for w, _ in wins:
            keys.setdefault((t[w.start:w.end], r), len(keys))
    uniq = list(keys)
    preds = guard.predict_from_features(guard.features([k[0] for k in uniq], [k[1] for k in uniq]))
    out = []
    for t, r, wins in zip(texts, roles, per_item):
        agg = WindowAggregator(thresholds)
        for w, s in wins:
            j = keys[(t[w.start:w.end], r)]
            agg.add({k: v[j] for k, v in preds.items()}, w, s)
        out.append(agg.result(r, len(t), guard.version))
    return out


def moderate(guard: GuardModel, *, prompt: str | None = None, response: str | None = None,
             thresholds: Thresholds) -> dict[str, ModerationResult]:
    """A request carrying a prompt, a response or both; each is classified separately, with its own role."""
    items = [(role, text) for role, text in (("prompt", prompt), ("response", response)) if text is not None]
    if not items:
        raise InvalidArgument("prompt", "at least one of prompt or response is required")
    for role, text in items:
        validate_text(text, role)
    res = moderate_batch(guard, [t for _, t in items], [r for r, _ in items], thresholds)
    return {r: x for (r, _), x in zip(items, res)}
