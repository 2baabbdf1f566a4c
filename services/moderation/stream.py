"""Streaming moderation: feed text chunks as an LLM produces them; get back how much is safe to show.

Each chunk only triggers work for the sentences it completes: the window ending at each new sentence (that sentence
and the W-1 before it) is scored, never the whole text. Sentence segmentation is prefix-stable (text.py) and the
aggregation is the unary one (decision.WindowAggregator), so `finish()` returns exactly `moderate_batch` on the
concatenated text."""
from __future__ import annotations

from dataclasses import dataclass

from services.common.errors import FailedPrecondition, InvalidArgument
from services.moderation.decision import ModerationResult, Thresholds, WindowAggregator
from services.moderation.guard import GuardModel, validate_roles
from services.moderation.schema import MAX_TEXT_CHARS
from services.moderation.text import (
    DEFAULT_WINDOW_SENTENCES,
    Span,
    scan_sentences,
    window_span,
)


@dataclass(frozen=True)
class StreamUpdate:
    safe_offset: int           # text[:safe_offset] may be shown
    blocked: bool              # sticky: once a window blocks, the stream is blocked
    blocking_topics: tuple[str, ...]
    received: int              # characters received so far
    windows_scored: int


class StreamModerator:
    """One stream (one role). Not thread-safe: one producer feeds it."""

    def __init__(self, guard: GuardModel, thresholds: Thresholds, *, role: str = "response",
                 window: int = DEFAULT_WINDOW_SENTENCES):
        validate_roles([role], 1, field="role")
        self.guard, self.role, self.window = guard, role, window
        self._agg = WindowAggregator(thresholds)
        self._text = ""
        self._pos = 0
        self._sents: list[Span] = []
        self._finished: ModerationResult | None = None

    @property
    def text(self) -> str:
        return self._text

    def _score_new(self, new: list[Span]) -> None:
        for s in new:
            self._sents.append(s)
            w = window_span(self._sents, len(self._sents) - 1, self.window)
            phi = self.guard.features([self._text[w.start:w.end]], [self.role])
            pred = self.guard.predict_from_features(phi)
            self._agg.add({k: v[0] for k, v in pred.items()}, w, s)

    def _update(self) -> StreamUpdate:
        scored = self._sents[-1].end if self._sents else 0
        r = self._agg.result(self.role, len(self._text), self.guard.version, final=False, scored_until=scored)
        return StreamUpdate(r.safe_offset, r.blocked, r.blocking_topics, len(self._text), self._agg.n)

    def feed(self, chunk: str) -> StreamUpdate:
        if self._finished is not None:
            raise FailedPrecondition("stream already finished")
        if not isinstance(chunk, str):
            raise InvalidArgument("chunk", "must be text")
        if len(self._text) + len(chunk) > MAX_TEXT_CHARS:
            raise InvalidArgument("chunk", f"stream longer than {MAX_TEXT_CHARS} characters")
        self._text += chunk
        new, self._pos = scan_sentences(self._text, self._pos, final=False)
        self._score_new(new)
        return self._update()

    def finish(self) -> ModerationResult:
        """Score the trailing sentence and return the final answer (== unary moderate_batch on the text)."""
        if self._finished is None:
            if not self._text.strip():
                raise InvalidArgument("text", "must be a non-empty text")
            new, self._pos = scan_sentences(self._text, self._pos, final=True)
            self._score_new(new)
            self._finished = self._agg.result(self.role, len(self._text), self.guard.version)
        return self._finished
