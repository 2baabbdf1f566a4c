"""Streaming moderation: feed text chunks as an LLM produces them; get back how much is safe to show.

Work per message: only the sentences a message completes are new; they are packed into chunks exactly as the unary
path packs the whole text (decision.Chunker, greedy and prefix-stable), a chunk that closes is scored once, and the
chunk still growing is scored provisionally (each model forward covers at most one chunk: CHUNK_TOKENS word pieces).

Parity with Moderate (what is kept, and tested): the final answer (`finish()`) is the unary computation on the
whole text -- the same chunks, scored by the same model with the same context -- so it equals Moderate's result
(bit for bit when both encode each chunk alone, as here; within decision.SCORE_TOLERANCE and with equal decisions
when Moderate ran in a padded batch). Updates before the end are provisional verdicts on the complete sentences
received so far; `blocked` is sticky (once a prefix blocked, the stream stays blocked, whatever the rest of the text
says), so a text Moderate blocks is always reported blocked by the end, and as soon as a scored prefix blocks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.common.errors import FailedPrecondition, InvalidArgument
from services.moderation.decision import (
    CHUNK_TOKENS,
    Chunker,
    Item,
    ModerationResult,
    Thresholds,
    WindowAggregator,
    context_of,
    count_tokens,
    model_scorer,
    moderate_items,
)
from services.moderation.guard import validate_roles
from services.moderation.schema import MAX_TEXT_CHARS
from services.moderation.text import Span, scan_sentences


@dataclass(frozen=True)
class StreamUpdate:
    safe_offset: int           # text[:safe_offset] may be shown
    blocked: bool              # sticky: once a chunk (or a provisional prefix of one) blocks, the stream is blocked
    blocking_topics: tuple[str, ...]
    received: int              # characters received so far
    windows_scored: int        # chunk scorings so far (closed chunks + provisional ones)


class StreamModerator:
    """One stream (one role; a response may carry the prompt it answers). Not thread-safe: one producer feeds it."""

    def __init__(self, model: Any, thresholds: Thresholds, *, role: str = "response", prompt: str | None = None,
                 budget: int = CHUNK_TOKENS):
        validate_roles([role], 1, field="role")
        if prompt is not None and role != "response":
            raise InvalidArgument("prompt", "only a response stream is judged with a prompt")
        self.model, self.role, self.prompt = model, role, prompt
        self.thresholds = thresholds.resolve(getattr(model, "config", {}).get("decision_defaults"))
        self._raw_thresholds = thresholds
        self._context = context_of(prompt, budget) if prompt is not None else None
        self._score = model_scorer(model)
        self._closed = WindowAggregator(self.thresholds)   # closed chunks only
        self._chunker = Chunker(budget)
        self._text = ""
        self._pos = 0
        self._scored_until = 0
        self._n = 0
        self._sticky: set[str] = set()
        self._first_block: int | None = None
        self._finished: ModerationResult | None = None

    @property
    def text(self) -> str:
        return self._text

    def _pred(self, span: Span) -> dict:
        p = self._score([self._text[span.start:span.end]], [self.role], [self._context], False)
        self._n += 1
        return {k: v[0] for k, v in p.items()}

    def _add_sentences(self, new: list[Span]) -> None:
        if not new:
            return
        for s, n in zip(new, count_tokens([self._text[s.start:s.end] for s in new]), strict=True):
            closed = self._chunker.add(s, n)
            if closed is not None:
                self._closed.add(self._pred(closed), closed)
        self._scored_until = new[-1].end
        # the growing chunk, provisionally (on a copy of the closed chunks' aggregate)
        agg = WindowAggregator(self.thresholds)
        agg.__dict__.update({k: (v.copy() if hasattr(v, "copy") else v) for k, v in self._closed.__dict__.items()})
        open_span = self._chunker.open_span()
        if open_span is not None:
            agg.add(self._pred(open_span), open_span)
        r = agg.result(self.role, len(self._text), self.model.version, final=False, scored_until=self._scored_until)
        if r.blocked:
            self._sticky.update(r.blocking_topics)
            if self._first_block is None:  # everything before the new sentences was judged safe already
                self._first_block = max(r.safe_offset, new[0].start)

    def _update(self) -> StreamUpdate:
        safe = self._first_block if self._first_block is not None else self._scored_until
        return StreamUpdate(safe, bool(self._sticky), tuple(sorted(self._sticky)), len(self._text), self._n)

    def feed(self, chunk: str) -> StreamUpdate:
        if self._finished is not None:
            raise FailedPrecondition("stream already finished")
        if not isinstance(chunk, str):
            raise InvalidArgument("chunk", "must be text")
        if len(self._text) + len(chunk) > MAX_TEXT_CHARS:
            raise InvalidArgument("chunk", f"stream longer than {MAX_TEXT_CHARS} characters")
        self._text += chunk
        new, self._pos = scan_sentences(self._text, self._pos, final=False)
        self._add_sentences(new)
        return self._update()

    def finish(self) -> ModerationResult:
        """The final answer: the unary computation on the whole text (module doc)."""
        if self._finished is None:
            if not self._text.strip():
                raise InvalidArgument("text", "must be a non-empty text")
            new, self._pos = scan_sentences(self._text, self._pos, final=True)
            self._add_sentences(new)
            self._finished = moderate_items(self.model, [Item(self._text, self.role, self.prompt)],
                                            self._raw_thresholds)[0]
            if self._finished.blocked:
                self._sticky.update(self._finished.blocking_topics)
                if self._first_block is None:
                    self._first_block = self._finished.safe_offset
        return self._finished

    def final_update(self) -> StreamUpdate:
        return self._update()
