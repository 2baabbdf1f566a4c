"""Custom policies, SafeWatch style: a policy is a list of independent chunks

    C1: Weapons                              <- chunk id "Cn" and name
    Core value: Keep people physically safe. <- optional
    [BLOCKED] Helping someone build a weapon.
    [ALLOWED] Discussing weapon laws.

Every rule is encoded on its own (text "<chunk name>: <rule>", or "<chunk name> (<core value>): <rule>" when the
chunk states a core value, so the core value shapes what each of its rules matches; canonical MiniLM embedding),
every content sentence on its own (a response checked with its prompt: each sentence embedding is mixed with the
prompt's, normalize(s + CONTEXT_WEIGHT * p) -- a simplification of judging the pair, so that "Sure, here is how."
after a weapon request matches the weapon rules; the scorer is trained on the same mixed embedding for the labeled
responses that carry a prompt, `with_context`), and a learned scorer gives P(sentence matches rule) from the pair features
[s * r, |s - r|, s . r] (a logistic model fitted by Newton's method; trained with the 11 BingoGuard topic rubrics as
rules, see `train_policy_scorer`). A chunk is checked against the content on its own: the verdict of a chunk depends
only on the content, that chunk and the scorer, never on the order or number of other chunks or policies.

Chunk verdict: for each sentence, B = best [BLOCKED] rule score, A = best [ALLOWED] rule score; the sentence violates
the chunk when B >= threshold and B > A (an allowed rule that matches better overrides). The chunk is violated when
some sentence violates it; the explanation names the rule and the sentence (with its span) that matched best."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.moderation.decision import validate_text
from services.common.minilm import EMBED_DIM, MiniLMEncoder
from services.moderation.guard import newton_block_step
from services.moderation.metrics import f1_score
from services.moderation.schema import GuardExample
from services.moderation.taxonomy import RUBRIC_RULES, TOPIC_NAMES, TOPICS
from services.moderation.text import Span, split_sentences

MAX_CHUNKS = 64
MAX_RULES = 32
MAX_RULE_CHARS = 500
MAX_NAME_CHARS = 200
SCORER_FEATURE_SPEC = "pair[s*r,|s-r|,s.r]/minilm-l6/v1"
SCORER_DIM = 2 * EMBED_DIM + 1
CONTEXT_WEIGHT = 0.5
_ID = re.compile(r"^C[1-9][0-9]{0,3}$")


@dataclass(frozen=True)
class PolicyChunk:
    id: str
    name: str
    core_value: str
    blocked: tuple[str, ...]
    allowed: tuple[str, ...] = ()

    def rule_texts(self, kind: str) -> list[str]:
        head = f"{self.name} ({self.core_value})" if self.core_value else self.name
        return [f"{head}: {r}" for r in (self.blocked if kind == "blocked" else self.allowed)]


@dataclass(frozen=True)
class Policy:
    policy_id: str
    chunks: tuple[PolicyChunk, ...]


def _chunk_from_mapping(obj: Any, f: str) -> PolicyChunk:
    if not isinstance(obj, Mapping):
        raise InvalidArgument(f, "must be an object with id, name, core_value, blocked, allowed")
    cid, name = obj.get("id"), obj.get("name")
    if not isinstance(cid, str) or not _ID.match(cid):
        raise InvalidArgument(f"{f}.id", "must look like C1, C2, ...")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
        raise InvalidArgument(f"{f}.name", f"must be a non-empty string of at most {MAX_NAME_CHARS} characters")
    core = obj.get("core_value", "")
    if not isinstance(core, str) or len(core) > MAX_RULE_CHARS:
        raise InvalidArgument(f"{f}.core_value", f"must be a string of at most {MAX_RULE_CHARS} characters")
    rules: dict[str, tuple[str, ...]] = {}
    for kind in ("blocked", "allowed"):
        raw = obj.get(kind, [])
        if not isinstance(raw, (list, tuple)):
            raise InvalidArgument(f"{f}.{kind}", "must be a list of rules")
        if len(raw) > MAX_RULES:
            raise InvalidArgument(f"{f}.{kind}", f"at most {MAX_RULES} rules")
        for j, r in enumerate(raw):
            if not isinstance(r, str) or not r.strip() or len(r) > MAX_RULE_CHARS:
                raise InvalidArgument(f"{f}.{kind}[{j}]",
                                      f"must be a non-empty rule of at most {MAX_RULE_CHARS} characters")
        rules[kind] = tuple(r.strip() for r in raw)
    if not rules["blocked"]:
        raise InvalidArgument(f"{f}.blocked", "a chunk needs at least one [BLOCKED] rule")
    return PolicyChunk(cid, name.strip(), core.strip(), rules["blocked"], rules["allowed"])


def validate_policy(obj: Mapping[str, Any] | Policy, field: str = "policy") -> Policy:
    """{"policy_id": str, "chunks": [{"id": "C1", "name", "core_value", "blocked": [...], "allowed": [...]}]}."""
    if isinstance(obj, Policy):
        obj = {"policy_id": obj.policy_id, "chunks": [c.__dict__ for c in obj.chunks]}
    if not isinstance(obj, Mapping):
        raise InvalidArgument(field, "must be an object")
    pid = obj.get("policy_id")
    if not isinstance(pid, str) or not pid.strip() or len(pid) > MAX_NAME_CHARS:
        raise InvalidArgument(f"{field}.policy_id", "must be a non-empty string")
    chunks_raw = obj.get("chunks")
    if not isinstance(chunks_raw, (list, tuple)) or not chunks_raw:
        raise InvalidArgument(f"{field}.chunks", "a policy needs at least one chunk")
    if len(chunks_raw) > MAX_CHUNKS:
        raise InvalidArgument(f"{field}.chunks", f"at most {MAX_CHUNKS} chunks")
    chunks = [_chunk_from_mapping(c, f"{field}.chunks[{i}]") for i, c in enumerate(chunks_raw)]
    seen: set[str] = set()
    for i, c in enumerate(chunks):
        if c.id in seen:
            raise InvalidArgument(f"{field}.chunks[{i}].id", f"duplicate chunk id {c.id}")
        seen.add(c.id)
    return Policy(pid.strip(), tuple(chunks))


_HEAD = re.compile(r"^(C[0-9]+)\s*[:.-]\s*(.*)$")
_CORE = re.compile(r"^core\s*value\s*:\s*(.*)$", re.IGNORECASE)
_RULE = re.compile(r"^\[(BLOCKED|ALLOWED)\]\s*(.*)$", re.IGNORECASE)


def parse_policy_text(text: str, *, policy_id: str, field: str = "policy.text") -> Policy:
    """Parse the text form (see module doc). Errors name the line: "policy.text[line 7]"."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(field, "must be a non-empty policy text")
    chunks: list[dict[str, Any]] = []
    for ln, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if m := _HEAD.match(line):
            chunks.append({"id": m.group(1), "name": m.group(2), "core_value": "", "blocked": [], "allowed": []})
        elif not chunks:
            raise InvalidArgument(f"{field}[line {ln}]", "expected a chunk header like 'C1: Name'")
        elif m := _CORE.match(line):
            chunks[-1]["core_value"] = m.group(1)
        elif m := _RULE.match(line):
            chunks[-1][m.group(1).lower()].append(m.group(2))
        else:
            raise InvalidArgument(f"{field}[line {ln}]", "expected 'Core value: ...', '[BLOCKED] ...' or '[ALLOWED] ...'")
    return validate_policy({"policy_id": policy_id, "chunks": chunks}, field=field.rsplit(".", 1)[0])


# ------------------------------------------------------------------------------------------------ scorer
def pair_features(s: np.ndarray, r: np.ndarray) -> np.ndarray:
    """[m, k, SCORER_DIM] float64 features of every (sentence, rule) pair; s [m, 384], r [k, 384]."""
    s64, r64 = s.astype(np.float64)[:, None, :], r.astype(np.float64)[None, :, :]
    return np.concatenate([s64 * r64, np.abs(s64 - r64), (s64 * r64).sum(-1, keepdims=True)], axis=-1)


@dataclass
class PolicyScorer:
    w: np.ndarray  # [SCORER_DIM]
    b: float
    l2: float = 1e-3
    threshold: float = 0.5  # the default rule-match threshold, chosen on the training rows (choose_threshold)

    def score(self, s: np.ndarray, r: np.ndarray) -> np.ndarray:
        """P(sentence matches rule) [m, k]."""
        z = pair_features(s, r) @ self.w + self.b
        return 1.0 / (1.0 + np.exp(-z))

    def to_registry(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return ({"scorer.w": torch.from_numpy(self.w.copy()), "scorer.b": torch.tensor([self.b], dtype=torch.float64)},
                {"kind": "policy_scorer", "feature_spec": SCORER_FEATURE_SPEC, "l2": self.l2,
                 "default_threshold": self.threshold})

    @classmethod
    def from_registry(cls, tensors: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> PolicyScorer:
        if config.get("feature_spec") != SCORER_FEATURE_SPEC or "scorer.w" not in tensors:
            raise FailedPrecondition("model is not a policy scorer of this version")
        return cls(tensors["scorer.w"].to(torch.float64).numpy().copy(), float(tensors["scorer.b"][0]),
                   float(config.get("l2", 0.0)), float(config.get("default_threshold", 0.5)))


def rubric_rules(topics: Sequence[str] = TOPICS) -> list[tuple[str, str, str]]:
    """[(topic, kind, rule text as encoded)] from the taxonomy's rubric rules."""
    out = []
    for t in topics:
        blocked, allowed = RUBRIC_RULES[t]
        out += [(t, "blocked", f"{TOPIC_NAMES[t]}: {r}") for r in blocked]
        out += [(t, "allowed", f"{TOPIC_NAMES[t]}: {r}") for r in allowed]
    return out


def rule_label(ex: GuardExample, topic: str, kind: str) -> int:
    """Does the example match a rubric rule? blocked: the topic at severity >= 1; allowed: the topic at 0."""
    if topic not in ex.topics:
        return 0
    lvl = ex.severity.get(topic)
    if lvl is None:
        return int(kind == "blocked" and ex.unsafe)
    return int(lvl >= 1) if kind == "blocked" else int(lvl == 0)


def scorer_training_pairs(examples: Sequence[GuardExample], emb: np.ndarray, rules: Sequence[tuple[str, str, str]],
                          rule_emb: np.ndarray, *, neg_fraction: float = 0.25, seed: int = 0
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Pairs for the scorer: every positive, every same-topic negative (hard), a seeded fraction of the rest."""
    rng = np.random.default_rng(seed)
    X, y = [], []
    for i, ex in enumerate(examples):
        labels = np.array([rule_label(ex, t, k) for t, k, _ in rules])
        same = np.array([t in ex.topics for t, _, _ in rules])
        keep = (labels == 1) | same | (rng.random(len(rules)) < neg_fraction)
        if keep.any():
            X.append(pair_features(emb[i:i + 1], rule_emb[keep])[0])
            y.append(labels[keep])
    return np.concatenate(X), np.concatenate(y).astype(np.float64)


def fit_policy_scorer(X: np.ndarray, y: np.ndarray, *, l2: float = 1e-3, max_iter: int = 50,
                      tol: float = 1e-8) -> PolicyScorer:
    n_pos, n_neg = y.sum(), len(y) - y.sum()
    if n_pos == 0 or n_neg == 0:
        raise InvalidArgument("rows", "policy scorer training needs both matching and non-matching pairs")
    w = np.where(y > 0.5, 0.5 / n_pos, 0.5 / n_neg)
    Xb = np.concatenate([X, np.ones((len(X), 1))], axis=1)
    theta = np.zeros(Xb.shape[1])
    for _ in range(max_iter):
        theta, g = newton_block_step(theta, Xb, y, w, l2)
        if g < tol:
            break
    return PolicyScorer(theta[:-1].copy(), float(theta[-1]), l2)


def chunk_verdict_f1(scores: np.ndarray, rules: Sequence[tuple[str, str, str]], rows: Sequence[GuardExample],
                     threshold: float) -> float:
    """Macro-F1 over topics of the chunk verdict (a topic's [BLOCKED] rules vs its [ALLOWED] ones, decided as
    _check_chunk decides) against the rows' labels; scores [rows, rules] of whole texts, rules as rubric_rules."""
    f1s = []
    for topic in sorted({t for t, _, _ in rules}):
        b = [j for j, (t, k, _) in enumerate(rules) if t == topic and k == "blocked"]
        a = [j for j, (t, k, _) in enumerate(rules) if t == topic and k == "allowed"]
        best_b = scores[:, b].max(1)
        best_a = scores[:, a].max(1) if a else np.full(len(rows), -np.inf)
        f1s.append(f1_score((best_b >= threshold) & (best_b > best_a),
                            np.array([rule_label(e, topic, "blocked") for e in rows])))
    return float(np.mean(f1s))


def choose_threshold(scores: np.ndarray, rules: Sequence[tuple[str, str, str]], rows: Sequence[GuardExample]
                     ) -> float:
    """The rule-match threshold with the best chunk-verdict macro-F1 on labeled rows, from a grid of the scores'
    upper quantiles (the same procedure that tunes the rule-agnostic cosine baseline in the benchmark)."""
    grid = np.quantile(scores, np.linspace(0.5, 0.995, 60))
    best = max(grid, key=lambda q: chunk_verdict_f1(scores, rules, rows, float(q)))
    return float(np.clip(best, 0.01, 0.99))


def with_context(s_emb: np.ndarray, c_emb: np.ndarray) -> np.ndarray:
    """Sentence embeddings [m, 384] of a response mixed with its prompt's embedding [384]:
    normalize(s + CONTEXT_WEIGHT * c), float32 -- the same in training and in evaluate_policies."""
    mixed = s_emb.astype(np.float64) + CONTEXT_WEIGHT * c_emb.astype(np.float64)[None, :]
    return (mixed / np.linalg.norm(mixed, axis=1, keepdims=True)).astype(np.float32)


def train_policy_scorer(encoder: MiniLMEncoder, examples: Sequence[GuardExample], *, topics: Sequence[str] = TOPICS,
                        l2: float = 1e-3, seed: int = 0) -> PolicyScorer:
    """Train the scorer with the given topics' rubric rules over labeled guard examples (whole texts; a response
    that carries its prompt is embedded with it, as evaluate_policies embeds a response checked with its prompt --
    the pair's label belongs to the pair, not to the reply alone)."""
    rules = rubric_rules(topics)
    emb = encoder.embed([e.text for e in examples])
    has = [i for i, e in enumerate(examples) if e.prompt is not None]
    if has:
        ctx = encoder.embed([examples[i].prompt for i in has])
        for j, i in enumerate(has):
            emb[i] = with_context(emb[i:i + 1], ctx[j])[0]
    rule_emb = encoder.embed([r for _, _, r in rules])
    X, y = scorer_training_pairs(examples, emb, rules, rule_emb, seed=seed)
    scorer = fit_policy_scorer(X, y, l2=l2)
    # The logistic fit weighs matches and non-matches equally, so 0.5 is not where verdicts are best.
    scorer.threshold = choose_threshold(scorer.score(emb, rule_emb), rules, examples)
    return scorer


# ------------------------------------------------------------------------------------------------ evaluation
@dataclass(frozen=True)
class RuleMatch:
    kind: str            # "blocked" | "allowed"
    index: int           # index of the rule in the chunk's list of that kind
    rule: str
    score: float
    sentence: str
    span: Span


@dataclass(frozen=True)
class ChunkVerdict:
    policy_id: str
    chunk_id: str
    name: str
    violated: bool
    score: float                      # best [BLOCKED] rule score over sentences
    matched: RuleMatch | None         # the blocked rule and sentence behind the verdict
    overridden_by: RuleMatch | None   # an allowed rule that beat the best blocked match, if any


def _check_chunk(policy_id: str, chunk: PolicyChunk, content: str, spans: list[Span], s_emb: np.ndarray,
                 scorer: PolicyScorer, encoder: MiniLMEncoder, threshold: float) -> ChunkVerdict:
    b_scores = scorer.score(s_emb, encoder.embed(chunk.rule_texts("blocked")))  # [m, kb]
    a_scores = (scorer.score(s_emb, encoder.embed(chunk.rule_texts("allowed"))) if chunk.allowed
                else np.zeros((len(spans), 0)))
    best_b = b_scores.max(1)
    best_a = a_scores.max(1) if chunk.allowed else np.full(len(spans), -1.0)
    violating = (best_b >= threshold) & (best_b > best_a)

    def match(kind: str, scores: np.ndarray, i: int) -> RuleMatch:
        j = int(np.argmax(scores[i]))
        rules = chunk.blocked if kind == "blocked" else chunk.allowed
        sp = spans[i]
        return RuleMatch(kind, j, rules[j], float(scores[i, j]), content[sp.start:sp.end], sp)

    if violating.any():
        i = int(np.argmax(np.where(violating, best_b, -1.0)))
        return ChunkVerdict(policy_id, chunk.id, chunk.name, True, float(best_b.max()), match("blocked", b_scores, i),
                            None)
    i = int(np.argmax(best_b))
    over = match("allowed", a_scores, i) if (best_b[i] >= threshold and chunk.allowed) else None
    return ChunkVerdict(policy_id, chunk.id, chunk.name, False, float(best_b.max()), match("blocked", b_scores, i),
                        over)


def policy_texts(content: str, policies: Sequence[Policy], context: str | None = None) -> list[str]:
    """Every text evaluate_policies embeds for this content: its sentences, the context, the chunks' rules (so a
    caller can encode them all beforehand, in its own batches, and pass an EmbeddingTable)."""
    out = [content[s.start:s.end] for s in split_sentences(content)]
    if context is not None:
        out.append(context)
    for p in policies:
        for c in p.chunks:
            out += c.rule_texts("blocked") + (c.rule_texts("allowed") if c.allowed else [])
    return out


class EmbeddingTable:
    """Precomputed embeddings in an encoder's place: embed(texts) looks each text up (a missing one is a bug of the
    caller's policy_texts, so it raises)."""

    def __init__(self, table: Mapping[str, np.ndarray]):
        self.table = table

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, EMBED_DIM), dtype=np.float32)
        return np.stack([np.asarray(self.table[t], dtype=np.float32) for t in texts])


def evaluate_policies(content: str, policies: Sequence[Policy], scorer: PolicyScorer,
                      encoder: MiniLMEncoder | EmbeddingTable,
                      *, threshold: float | None = None, field: str = "content", context: str | None = None
                      ) -> list[ChunkVerdict]:
    """One verdict per chunk of every policy, in input order (multi-label). Each chunk is evaluated independently,
    so verdicts are bit-identical under any permutation or extension of `policies`. threshold None: the scorer's
    default (chosen on its training rows)."""
    validate_text(content, field)
    if threshold is None:
        threshold = scorer.threshold
    if isinstance(threshold, bool) or not 0.0 < float(threshold) < 1.0:
        raise InvalidArgument("threshold", "must be a probability strictly between 0 and 1")
    spans = split_sentences(content)
    s_emb = encoder.embed([content[s.start:s.end] for s in spans])
    if context is not None:
        validate_text(context, "prompt")
        s_emb = with_context(s_emb, encoder.embed([context])[0])
    return [_check_chunk(p.policy_id, c, content, spans, s_emb, scorer, encoder, float(threshold))
            for p in policies for c in p.chunks]
