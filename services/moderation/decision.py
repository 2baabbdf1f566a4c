"""Moderation decisions under per-tenant, per-topic severity thresholds, over the text's chunks.

Chunks (cost: about one encoder forward per text). A text is split into sentences (text.py, prefix-stable) and the
sentences are packed greedily, in order, into chunks of at most CHUNK_TOKENS MiniLM word pieces (the encoder's 256
minus [CLS]/[SEP]); a text up to that size is one chunk, i.e. the whole text in one forward. Each chunk is scored
once with the model (the guard, or the distilled student); a response is scored with its prompt as context (the
prompt's last chunk: the whole prompt when it fits in one). Packing is greedy over the sentence sequence, so the
chunks closed in any prefix of a text are the first chunks of the whole text (the streaming check relies on this).
A sentence longer than the budget is a chunk of its own, and the encoder reads its first 256 word pieces only
(text.py cuts sentences at 400 characters, far fewer tokens than that for ordinary text).

Per chunk: topic t is present when P(topic t) >= topic_threshold; its level is the model's severity (#{k : P(>= k)
>= .5}); the chunk blocks topic t when t is present and level >= levels[t] (a level threshold k blocks every level
>= k; 0 blocks any content on the topic). (Also gating topic blocks on P(unsafe) >= unsafe_threshold was measured
on the seed validation split: recall 0.455 instead of 0.625 at the same 4.3% benign false-block rate, so it is not
done.) A flagged chunk (P(unsafe) >= unsafe_threshold) with no present topic
blocks as "unspecified" when block_unspecified is set. The text is blocked iff some chunk blocks. Decisions are
monotone in the level thresholds and in unsafe_threshold (lowering one never unblocks anything), not in
topic_threshold: lowering it can name a topic for a flagged chunk whose level is below that topic's threshold, which
then no longer blocks as "unspecified" (a named topic's level threshold is the tenant's stated intent).

Defaults (the issue's "decisions that do not block on noise"): every topic's level is DEFAULT_LEVEL = 2, so a topic
at severity 1 alone (tame fiction, a mild joke) does not block; unsafe_threshold and topic_threshold left unset
(None) take the served model's `decision_defaults`, chosen on its validation split by `choose_defaults` as the
most recall (of rows at severity >= 2) whose benign false-block rate is <= the job's target_false_block_rate
(5% by default); 0.5 where a model has none. A tenant's explicit values always win.

Aggregates: unsafe score, topic scores and P(severity >= k) are maxima over chunks; a topic's severity is the max of
its level over the chunks where it is present (0 when absent). safe_offset: the character offset up to which the
text is safe to show -- the start of the first blocking chunk, else len(text)."""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from services.common.errors import InvalidArgument
from services.moderation.schema import MAX_TEXT_CHARS
from services.moderation.taxonomy import (
    MAX_SEVERITY,
    N_TOPICS,
    TOPIC_INDEX,
    TOPIC_NAMES,
    TOPICS,
)
from services.moderation.text import Span, split_sentences

N_LEVELS = MAX_SEVERITY
DEFAULT_LEVEL = 2          # severity 1 alone does not block by default
FALLBACK_THRESHOLD = 0.5   # unsafe / topic threshold of a model without decision defaults
CHUNK_TOKENS = 254         # MiniLM's 256 positions minus [CLS] and [SEP]
UNSPECIFIED = "unspecified"
# Parity kept under dynamic batching: a text encoded in a padded batch differs from the same text encoded alone in
# the last bits (GEMM shapes); scores agree within SCORE_TOLERANCE and decisions are equal unless a score lies
# within SCORE_TOLERANCE of its threshold.
SCORE_TOLERANCE = 1e-4


@dataclass(frozen=True)
class Thresholds:
    """A tenant's decision settings. levels[t] in 0..4 for topic TOPICS[t]; unsafe/topic thresholds None = the
    served model's decision defaults (resolve())."""

    levels: tuple[int, ...] = (DEFAULT_LEVEL,) * N_TOPICS
    unsafe_threshold: float | None = None
    topic_threshold: float | None = None
    block_unspecified: bool = True

    @classmethod
    def build(cls, levels: Mapping[str, Any] | None = None, *, default_level: Any = DEFAULT_LEVEL,
              unsafe_threshold: Any = None, topic_threshold: Any = None, block_unspecified: bool = True,
              field: str = "thresholds") -> Thresholds:
        """Validate and build; topics missing from `levels` get `default_level`. Raises InvalidArgument naming
        e.g. "thresholds.levels.S3" or "thresholds.unsafe_threshold" (field="" gives "levels.S3")."""
        pre = f"{field}." if field else ""

        def level(v: Any, f: str) -> int:
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_SEVERITY:
                raise InvalidArgument(f, f"severity threshold must be an integer between 0 and {MAX_SEVERITY}")
            return v

        d = level(default_level, f"{pre}default_level")
        out = [d] * N_TOPICS
        for k, v in (levels or {}).items():
            if k not in TOPIC_INDEX:
                raise InvalidArgument(f"{pre}levels.{k}", "unknown topic; expected one of S1..S11")
            out[TOPIC_INDEX[k]] = level(v, f"{pre}levels.{k}")
        for name, v in (("unsafe_threshold", unsafe_threshold), ("topic_threshold", topic_threshold)):
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < float(v) < 1.0:
                raise InvalidArgument(f"{pre}{name}", "must be a probability strictly between 0 and 1")
        return cls(tuple(out), None if unsafe_threshold is None else float(unsafe_threshold),
                   None if topic_threshold is None else float(topic_threshold), bool(block_unspecified))

    def resolve(self, defaults: Mapping[str, Any] | None) -> Thresholds:
        """Unset probability thresholds filled from a model's decision_defaults (0.5 without)."""
        d = defaults or {}
        u = self.unsafe_threshold if self.unsafe_threshold is not None else float(
            d.get("unsafe_threshold", FALLBACK_THRESHOLD))
        t = self.topic_threshold if self.topic_threshold is not None else float(
            d.get("topic_threshold", FALLBACK_THRESHOLD))
        return replace(self, unsafe_threshold=u, topic_threshold=t)


@dataclass(frozen=True)
class TopicResult:
    topic: str
    name: str
    score: float                     # max over chunks of P(topic)
    present: bool
    severity: int                    # 0..4 (0 when absent)
    severity_ge: tuple[float, ...]   # max over chunks of P(severity >= k), k = 1..4; non-increasing
    blocked: bool


@dataclass(frozen=True)
class ModerationResult:
    role: str
    flagged: bool                    # unsafe_score >= unsafe_threshold
    unsafe_score: float
    blocked: bool                    # the decision under the tenant's thresholds
    blocking_topics: tuple[str, ...]  # topics (or "unspecified") that block in some chunk
    top_topic: str | None            # highest-scoring present topic
    topics: tuple[TopicResult, ...]
    safe_offset: int
    evidence: Span | None            # the first blocking chunk, else the top topic's best chunk
    model_version: str
    n_windows: int = 0               # chunks scored
    model_kind: str = ""             # which kind of model answered ("frozen_linear", "finetune", "guard.student")
    # The whole text's prediction (a predict_proba row, no chunking), when the caller asked for it (score_items
    # whole=True: what a conformal calibration reads); not part of the result's identity.
    whole: Mapping[str, np.ndarray] | None = field(default=None, compare=False, repr=False)


@dataclass
class WindowAggregator:
    """Folds chunk predictions, in order, into a ModerationResult (shared by unary and streaming). `thresholds`
    must be resolved (no None)."""

    thresholds: Thresholds
    unsafe: float = 0.0
    topic: np.ndarray = field(default_factory=lambda: np.zeros(N_TOPICS))
    sev_ge: np.ndarray = field(default_factory=lambda: np.zeros((N_TOPICS, N_LEVELS)))
    level: np.ndarray = field(default_factory=lambda: -np.ones(N_TOPICS, dtype=np.int64))
    topic_best: list[Span | None] = field(default_factory=lambda: [None] * N_TOPICS)
    blocking: set[str] = field(default_factory=set)
    first_block: Span | None = None
    n: int = 0

    def __post_init__(self) -> None:
        if self.thresholds.unsafe_threshold is None or self.thresholds.topic_threshold is None:
            self.thresholds = self.thresholds.resolve(None)

    def add(self, pred: Mapping[str, Any], window: Span) -> bool:
        """Add one chunk's prediction (a row of predict_proba). Returns whether it blocks."""
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
                self.first_block = window
        return bool(blocks)

    @property
    def blocked(self) -> bool:
        return bool(self.blocking)

    def result(self, role: str, text_len: int, model_version: str, *, final: bool = True,
               scored_until: int = 0, model_kind: str = "") -> ModerationResult:
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
            safe, evidence = self.first_block.start, self.first_block
        else:
            safe = text_len if final else scored_until
            evidence = self.topic_best[TOPIC_INDEX[top]] if top else None
        order = {t: i for i, t in enumerate((*TOPICS, UNSPECIFIED))}
        return ModerationResult(role=role, flagged=self.unsafe >= th.unsafe_threshold, unsafe_score=self.unsafe,
                                blocked=self.blocked, blocking_topics=tuple(sorted(self.blocking, key=order.get)),
                                top_topic=top, topics=tuple(topics), safe_offset=safe, evidence=evidence,
                                model_version=model_version, n_windows=self.n, model_kind=model_kind)


def validate_text(text: Any, field: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(field, "must be a non-empty text")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidArgument(field, f"longer than {MAX_TEXT_CHARS} characters")
    return text


# ---------------------------------------------------------------------------------------------- chunking
_TOKENIZER: Any = None
_TOKENIZER_LOCK = threading.Lock()


def count_tokens(sentences: Sequence[str]) -> list[int]:
    """MiniLM word pieces per sentence (no special tokens). BERT's pre-tokenizer splits on whitespace and
    punctuation, so the pieces of sentences joined by whitespace are exactly the concatenation of theirs."""
    global _TOKENIZER
    with _TOKENIZER_LOCK:
        if _TOKENIZER is None:
            from transformers import AutoTokenizer

            from services.common.minilm import base_model_path

            _TOKENIZER = AutoTokenizer.from_pretrained(base_model_path(), local_files_only=True)
        tok = _TOKENIZER
    if not sentences:
        return []
    return [len(x) for x in tok(list(sentences), add_special_tokens=False)["input_ids"]]


@dataclass
class Chunker:
    """Greedy packing of sentences into chunks of <= budget tokens, fed sentence by sentence (prefix-stable).
    closed: the chunks that can no longer grow; open_span(): the chunk still growing (None when empty)."""

    budget: int = CHUNK_TOKENS
    closed: list[Span] = field(default_factory=list)
    _start: int = -1
    _end: int = -1
    _tokens: int = 0

    def add(self, sentence: Span, tokens: int) -> Span | None:
        """Add the next sentence; returns the chunk it closed, if any."""
        closed = None
        if self._start >= 0 and self._tokens + tokens > self.budget:
            closed = Span(self._start, self._end)
            self.closed.append(closed)
            self._start = -1
        if self._start < 0:
            self._start, self._tokens = sentence.start, 0
        self._end = sentence.end
        self._tokens += tokens
        return closed

    def open_span(self) -> Span | None:
        return Span(self._start, self._end) if self._start >= 0 else None

    def all(self) -> list[Span]:
        o = self.open_span()
        return self.closed + ([o] if o is not None else [])


def text_chunks(text: str, budget: int = CHUNK_TOKENS) -> list[Span]:
    sents = split_sentences(text)
    ch = Chunker(budget)
    for s, n in zip(sents, count_tokens([text[s.start:s.end] for s in sents]), strict=True):
        ch.add(s, n)
    return ch.all()


def context_of(prompt: str | None, budget: int = CHUNK_TOKENS) -> str | None:
    """The prompt context a response is judged with: the prompt's last chunk (the whole prompt if it fits)."""
    if prompt is None:
        return None
    chunks = text_chunks(prompt, budget)
    last = chunks[-1]
    return prompt[last.start:last.end]


# ---------------------------------------------------------------------------------------------- scoring
# A scorer: (texts, roles, contexts, batched) -> predict_proba-like dict of arrays, one row per text.
Score = Callable[[Sequence[str], Sequence[str], Sequence[str | None], bool], Mapping[str, np.ndarray]]


def model_scorer(model: Any) -> Score:
    """The scoring function of a served model: a GuardModel (teacher: MiniLM embeddings of the unique texts and
    contexts, one forward each, padded batches when batched) or a StudentGuard (bag of n-grams)."""
    if getattr(model, "kind", "") == "guard.student" or getattr(model, "reads_pairs", False):  # student, Gemma
        def score_student(texts, roles, contexts, batched):
            if batched:
                return model.predict_proba_batched(texts, roles, contexts)
            return model.predict_proba(texts, roles, contexts)
        return score_student

    def score_guard(texts, roles, contexts, batched):
        from services.moderation.guard import context_mask

        mask = context_mask(roles, contexts)
        uniq: dict[str, int] = {}
        for t in list(texts) + [c for c, m in zip(contexts, mask, strict=False) if m]:
            uniq.setdefault(t, len(uniq))
        keys = list(uniq)
        enc = model.encoder
        emb = enc.embed_batched(keys) if batched else enc.embed(keys)
        e = emb[[uniq[t] for t in texts]]
        c = np.zeros_like(e)
        if mask.any():
            c[mask] = emb[[uniq[x] for x, m in zip(contexts, mask, strict=False) if m]]
        return model.predict_from_features(model.features_from_embeddings(e, roles, c, mask))
    return score_guard


@dataclass(frozen=True)
class Item:
    """One text to moderate: its role and, for a response, the prompt it answers (or None)."""

    text: str
    role: str
    prompt: str | None = None


def moderate_items(model: Any, items: Sequence[Item], thresholds: Thresholds, *, batched: bool = False,
                   decision_defaults: Mapping[str, Any] | None = None) -> list[ModerationResult]:
    """Moderate many texts at once. Every chunk of every text, with its context, is scored in one call; identical
    (chunk, role, context) are scored once."""
    return score_items(model, items, thresholds, batched=batched, decision_defaults=decision_defaults)


def score_items(model: Any, items: Sequence[Item], thresholds: Thresholds, *, batched: bool = False,
                decision_defaults: Mapping[str, Any] | None = None, whole: Sequence[bool] | None = None
                ) -> list[ModerationResult]:
    """moderate_items, and for each item with whole[i] set, the whole text's prediction (predict_proba of the text
    with its full prompt, as the calibration job scores its rows) in ModerationResult.whole, from the same scorer
    call: a text that is one chunk with its whole prompt as context costs nothing more. The engine's dynamic
    batcher calls this with batched=True."""
    from services.moderation.guard import validate_roles

    for i, it in enumerate(items):
        validate_text(it.text, f"texts[{i}]")
        if it.prompt is not None:
            validate_text(it.prompt, f"prompts[{i}]")
    validate_roles([it.role for it in items], len(items))
    defaults = decision_defaults if decision_defaults is not None else getattr(model, "config", {}).get(
        "decision_defaults")
    th = thresholds.resolve(defaults)
    per_item = [text_chunks(it.text) for it in items]
    ctx = [context_of(it.prompt) if it.role == "response" else None for it in items]
    keys: dict[tuple[str, str, str | None], int] = {}
    for it, chunks, c in zip(items, per_item, ctx, strict=True):
        for w in chunks:
            keys.setdefault((it.text[w.start:w.end], it.role, c), len(keys))
    wants = list(whole) if whole is not None else [False] * len(items)
    for it, want in zip(items, wants, strict=True):
        if want:
            keys.setdefault(whole_key(it), len(keys))
    uniq = list(keys)
    preds = model_scorer(model)([k[0] for k in uniq], [k[1] for k in uniq], [k[2] for k in uniq], batched)
    kind = str(getattr(model, "kind", ""))
    out = []
    for it, chunks, c, want in zip(items, per_item, ctx, wants, strict=True):
        agg = WindowAggregator(th)
        for w in chunks:
            j = keys[(it.text[w.start:w.end], it.role, c)]
            agg.add({k: v[j] for k, v in preds.items()}, w)
        res = agg.result(it.role, len(it.text), model.version, model_kind=kind)
        if want:
            j = keys[whole_key(it)]
            res = replace(res, whole={k: v[j] for k, v in preds.items()})
        out.append(res)
    return out


def whole_key(it: Item) -> tuple[str, str, str | None]:
    """(text, role, context) of a whole text: a response with its full prompt."""
    return it.text, it.role, it.prompt if it.role == "response" else None


def moderate_batch(model: Any, texts: Sequence[str], roles: Sequence[str], thresholds: Thresholds,
                   prompts: Sequence[str | None] | None = None, *, batched: bool = False) -> list[ModerationResult]:
    """moderate_items over parallel lists (prompts[i]: the prompt response i answers, or None)."""
    if len(roles) != len(texts):
        raise InvalidArgument("roles", f"expected {len(texts)} roles, got {len(roles)}")
    ps = list(prompts) if prompts is not None else [None] * len(texts)
    return moderate_items(model, [Item(t, r, p) for t, r, p in zip(texts, roles, ps, strict=True)], thresholds,
                          batched=batched)


def moderate(model: Any, *, prompt: str | None = None, response: str | None = None,
             thresholds: Thresholds) -> dict[str, ModerationResult]:
    """A request carrying a prompt, a response or both. With both, the response is judged with the prompt."""
    items = []
    if prompt is not None:
        items.append(Item(validate_text(prompt, "prompt"), "prompt"))
    if response is not None:
        items.append(Item(validate_text(response, "response"), "response", prompt))
    if not items:
        raise InvalidArgument("prompt", "at least one of prompt or response is required")
    return {it.role: r for it, r in zip(items, moderate_items(model, items, thresholds), strict=True)}


# ---------------------------------------------------------------------------------------------- defaults
def block_decisions(pred: Mapping[str, np.ndarray], th: Thresholds) -> np.ndarray:
    """Blocked flags [N] for single-chunk predictions (the rows of a validation set) under resolved thresholds."""
    tp = pred["topics"] >= th.topic_threshold
    lv = np.asarray(th.levels)[None, :]
    topic_block = (tp & (pred["severity"] >= lv)).any(1)
    unspecified = (pred["unsafe"] >= th.unsafe_threshold) & ~tp.any(1) & th.block_unspecified
    return topic_block | unspecified


def choose_defaults(pred: Mapping[str, np.ndarray], rows: Sequence[Any], *, target_false_block_rate: float = 0.05,
                    level: int = DEFAULT_LEVEL) -> dict[str, Any]:
    """The decision defaults of a model, chosen on its validation rows (single-chunk predictions `pred`): over a
    grid of (unsafe_threshold, topic_threshold) with every topic's level at `level`, the pair with the highest
    recall of rows whose severity is >= level (ties: lower false-block rate, then lower thresholds) among those
    whose benign false-block rate (blocked safe rows / safe rows) is <= target; if none meets the target, the
    pair with the lowest false-block rate."""
    unsafe = np.array([bool(r.unsafe) for r in rows])
    sev = np.array([max(r.severity.values()) if r.severity else (-1 if r.unsafe else 0) for r in rows])
    want = unsafe & ((sev >= level) | (sev < 0))      # rows the default should block (unknown severity: unsafe)
    benign = ~unsafe
    best: tuple | None = None
    for tt in (0.5, 0.6, 0.7, 0.8, 0.9):
        for ut in np.round(np.linspace(0.5, 0.98, 25), 3):
            th = Thresholds((level,) * N_TOPICS, float(ut), float(tt), True)
            b = block_decisions(pred, th)
            fbr = float(b[benign].mean()) if benign.any() else 0.0
            rec = float(b[want].mean()) if want.any() else 1.0
            ok = fbr <= target_false_block_rate
            key = (ok, rec if ok else -fbr, -fbr, -tt, -ut)
            if best is None or key > best[0]:
                best = (key, float(ut), float(tt), fbr, rec, float(b[unsafe].mean()) if unsafe.any() else 1.0)
    assert best is not None
    _, ut, tt, fbr, rec, rec_all = best
    return {"unsafe_threshold": ut, "topic_threshold": tt, "default_level": level,
            "target_false_block_rate": float(target_false_block_rate), "false_block_rate": fbr, "recall": rec,
            "recall_all_unsafe": rec_all, "n_benign": int(benign.sum()), "n_target": int(want.sum()),
            "chosen_on": "validation split"}
