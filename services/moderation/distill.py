"""HarmAug distillation of the guard into a small student (github imnotkind/HarmAug, src/kd_trainer.py).

Student ("guard.student"): a bag-of-n-grams network trained from scratch, fastText-style --
  tokens      lower-cased words ([a-z0-9']+); features = word unigrams and bigrams looked up in a vocabulary built
              offline from the training texts (ids 0..V-1), plus hashed character 3-grams of every word (ids
              V..V+B-1, blake2b), so unseen words still land on shared sub-word features;
  network     EmbeddingBag(mean, dim) of the text e, and of the prompt a response answers c (the same bag; zero
              when there is none) -> [e, role bit (response = 1), c, has-prompt bit] -> Linear(2*dim+2, hidden) -> ReLU
              (so a response is judged with its prompt, as the teacher does; with `interaction`, also e * c in
              the input), then heads
              unsafe   2 logits (safe, unsafe) as HarmAug's num_labels=2 sequence classifier
              topics   11 logits (multi-label)
              severity 11 x 4 "severity >= k" logits, slope shared across k plus one bias per k (the teacher's form);
                       reported P(>= k) is the running minimum over k and the level is #{k : P(>= k) >= 0.5}.
  It answers the teacher's predict_proba interface: {"unsafe" [N], "topics" [N, 11], "severity_ge" [N, 11, 4],
  "severity" int [N, 11]}. Only "unsafe" is trained with the HarmAug loss; topics and severities imitate the
  teacher's probabilities (auxiliary soft-label BCE) and are as good as the teacher's on the training texts at best.

Loss (kd_trainer.py, per mini-batch): with the student's 2-class logits z, hard labels y and the teacher's
P(unsafe) = t,
    L = 0.5 * ( CE(z, y)  +  KL( [1-t, t] || softmax(z) ) )
CE is averaged over the batch; KL is F.kl_div(log_softmax(z), targets, reduction="batchmean"), i.e. summed over the
two classes and averaged over the batch; temperature 1 (none). Training as there: AdamW, linear warm-up then linear
decay, gradient clipping (max_norm), class-balanced sampling with replacement (WeightedRandomSampler, weights
1 / class count of the hard labels). Hard labels: the dataset's label where there is one, the teacher's
P(unsafe) > 0.5 for augmented texts (HarmAug's `unsafe-score > 0.5`).
Auxiliary term (our addition, weight `aux_weight`): mean BCE(student topic / severity>=k logits, teacher
probabilities) -- the student learns topics and severities from the teacher alone.
"""
from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from services.common.errors import FailedPrecondition, InvalidArgument
from services.moderation.guard import context_mask, validate_roles
from services.moderation.taxonomy import MAX_SEVERITY, N_TOPICS, TOPICS

STUDENT_KIND = "guard.student"
STUDENT_SPEC = "bag-of-ngrams+prompt-context/v2"
_WORD = re.compile(r"[a-z0-9']+")


# ------------------------------------------------------------------------------------------------ the loss
def harmaug_loss(logits: torch.Tensor, hard: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    """0.5 * (CE(logits, hard) + KL([1-soft, soft] || softmax(logits))), both averaged over the batch.
    logits [B, 2] (safe, unsafe); hard [B] int 0/1; soft [B] teacher P(unsafe) in [0, 1]."""
    if logits.ndim != 2 or logits.shape[1] != 2 or hard.shape != logits.shape[:1] or soft.shape != hard.shape:
        raise ValueError(f"harmaug_loss: logits {tuple(logits.shape)}, hard {tuple(hard.shape)}, "
                         f"soft {tuple(soft.shape)}")
    ce = F.cross_entropy(logits, hard.long())
    targets = torch.stack([1 - soft, soft], dim=1).to(logits.dtype)
    kl = F.kl_div(F.log_softmax(logits, dim=1), targets, reduction="batchmean")
    return 0.5 * (ce + kl)


def aux_loss(topic_logits: torch.Tensor, sev_logits: torch.Tensor, t_topics: torch.Tensor,
             t_sev_ge: torch.Tensor) -> torch.Tensor:
    """Soft-label BCE to the teacher's topic [B, 11] and severity>=k [B, 11, 4] probabilities (means)."""
    return (F.binary_cross_entropy_with_logits(topic_logits, t_topics.to(topic_logits.dtype))
            + F.binary_cross_entropy_with_logits(sev_logits, t_sev_ge.to(sev_logits.dtype)))


# ------------------------------------------------------------------------------------------------ tokenizer
def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _h64(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little", signed=True)


def _grams(ws: list[str]) -> list[str]:
    return ws + [f"{a} {b}" for a, b in itertools.pairwise(ws)]


class Vocabulary:
    """Word unigrams + bigrams seen in the training texts (stored as 64-bit hashes, so the registry holds tensors,
    not strings) and `buckets` hashed character-3-gram ids after them."""

    def __init__(self, hashes: Sequence[int], buckets: int):
        self.hashes = np.asarray(hashes, dtype=np.int64)
        self.buckets = int(buckets)
        self.index = {int(h): i for i, h in enumerate(self.hashes)}
        if len(self.index) != len(self.hashes):
            raise FailedPrecondition("student vocabulary has duplicate entries")

    @classmethod
    def build(cls, texts: Sequence[str], *, buckets: int, min_count: int = 1, max_size: int = 50_000) -> Vocabulary:
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update(_grams(words(t)))
        kept = sorted((g for g, c in counts.items() if c >= min_count), key=lambda g: (-counts[g], g))[:max_size]
        return cls([_h64(g) for g in kept], buckets)

    @property
    def size(self) -> int:
        return len(self.hashes) + self.buckets

    def encode(self, text: str) -> list[int]:
        ws = words(text)
        ids = [self.index[h] for h in map(_h64, _grams(ws)) if h in self.index]
        v = len(self.hashes)
        if self.buckets:
            for w in ws:
                padded = f"<{w}>"
                ids += [v + (_h64("#" + padded[i:i + 3]) % self.buckets) for i in range(len(padded) - 2)]
        return ids

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"vocab.hash": torch.from_numpy(self.hashes.copy())}


def pack(ids: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(flat ids, offsets) for nn.EmbeddingBag; an empty text gets no ids (its bag embeds to zero)."""
    lens = [len(x) for x in ids]
    flat = torch.tensor([i for x in ids for i in x], dtype=torch.long)
    offsets = torch.tensor([0] + list(np.cumsum(lens[:-1])), dtype=torch.long) if ids else torch.zeros(0, dtype=torch.long)
    return flat, offsets


# ------------------------------------------------------------------------------------------------ the network
@dataclass(frozen=True)
class StudentConfig:
    dim: int = 64
    hidden: int = 64
    buckets: int = 4096
    min_count: int = 1
    max_vocab: int = 50_000
    # Also the elementwise product e * c of the text's and the prompt's bags in the input (zero without a prompt):
    # a cheap explicit reply-given-request interaction on top of what the hidden layer mixes.
    interaction: bool = False

    def validate(self, prefix: str = "params.") -> None:
        for name, lo, hi in (("dim", 4, 1024), ("hidden", 4, 1024), ("buckets", 0, 1 << 20), ("min_count", 1, 100),
                             ("max_vocab", 1, 1_000_000)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise InvalidArgument(prefix + name, f"must be an integer in {lo}..{hi}")
        if not isinstance(self.interaction, bool):
            raise InvalidArgument(prefix + "interaction", "must be a boolean")


class StudentNet(nn.Module):
    def __init__(self, n_ids: int, cfg: StudentConfig):
        super().__init__()
        self.emb = nn.EmbeddingBag(n_ids, cfg.dim, mode="mean")
        self.interaction = cfg.interaction
        self.hidden = nn.Linear((3 if cfg.interaction else 2) * cfg.dim + 2, cfg.hidden)
        self.unsafe = nn.Linear(cfg.hidden, 2)
        self.topics = nn.Linear(cfg.hidden, N_TOPICS)
        self.sev = nn.Linear(cfg.hidden, N_TOPICS, bias=False)
        self.sev_b = nn.Parameter(torch.tensor(np.tile([1.4, -0.2, -1.4, -2.9], (N_TOPICS, 1)), dtype=torch.float32))
        nn.init.normal_(self.emb.weight, std=0.1)

    def forward(self, flat: torch.Tensor, offsets: torch.Tensor, roles: torch.Tensor,
                cflat: torch.Tensor | None = None, coffsets: torch.Tensor | None = None,
                has: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        e = self.emb(flat, offsets)
        if cflat is None:
            c, hb = torch.zeros_like(e), torch.zeros(e.shape[0], 1, dtype=e.dtype)
        else:
            c, hb = self.emb(cflat, coffsets) * has[:, None].to(e.dtype), has[:, None].to(e.dtype)
        parts = [e, roles[:, None].to(e.dtype), c, hb] + ([e * c] if self.interaction else [])
        h = torch.relu(self.hidden(torch.cat(parts, dim=1)))
        return self.unsafe(h), self.topics(h), self.sev(h).unsqueeze(-1) + self.sev_b


def _probabilities(u: torch.Tensor, t: torch.Tensor, s: torch.Tensor) -> dict[str, np.ndarray]:
    ge = torch.cummin(torch.sigmoid(s.double()), dim=-1).values
    return {"unsafe": torch.softmax(u.double(), dim=1)[:, 1].numpy(), "topics": torch.sigmoid(t.double()).numpy(),
            "severity_ge": ge.numpy(), "severity": (ge >= 0.5).sum(-1).numpy().astype(np.int64)}


class StudentGuard:
    """A trained student. predict_proba(texts, roles) mirrors GuardModel.predict_proba (see module doc)."""

    def __init__(self, vocab: Vocabulary, net: StudentNet, cfg: StudentConfig, config: dict[str, Any] | None = None):
        self.vocab, self.net, self.cfg = vocab, net.eval(), cfg
        self.config = dict(config or {})

    @classmethod
    def from_registry(cls, tensors: dict[str, torch.Tensor], config: dict[str, Any]) -> StudentGuard:
        if config.get("kind") != STUDENT_KIND or config.get("student_spec") != STUDENT_SPEC:
            raise FailedPrecondition(f"not a {STUDENT_KIND} ({STUDENT_SPEC}) model: {config.get('kind')!r}")
        try:
            cfg = StudentConfig(**config["student"])
            vocab = Vocabulary(tensors["vocab.hash"].numpy(), cfg.buckets)
            net = StudentNet(vocab.size, cfg)
            net.load_state_dict({k[len("net."):]: v for k, v in tensors.items() if k.startswith("net.")})
        except (KeyError, RuntimeError, TypeError) as e:
            raise FailedPrecondition(f"student model does not load: {e}") from None
        return cls(vocab, net, cfg, config)

    def to_registry(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        tensors = {**self.vocab.tensors(), **{"net." + k: v.detach().clone() for k, v in self.net.state_dict().items()}}
        config = {**self.config, "kind": STUDENT_KIND, "student_spec": STUDENT_SPEC, "student": asdict(self.cfg),
                  "topics": list(TOPICS), "outputs": ["unsafe", "topics", "severity_ge", "severity"]}
        return tensors, config

    def fingerprint(self) -> str:
        h = hashlib.sha256(STUDENT_SPEC.encode())
        for k, v in sorted(self.to_registry()[0].items()):
            h.update(k.encode())
            h.update(v.contiguous().numpy().tobytes())
        return "sha256:" + h.hexdigest()[:16]

    kind = STUDENT_KIND

    @property
    def version(self) -> str:
        """The content fingerprint (computed once: the weights of a loaded student never change)."""
        if getattr(self, "_version", None) is None:
            self._version = self.fingerprint()
        return self._version

    def logits(self, texts: Sequence[str], roles: Sequence[str], contexts: Sequence[str | None] | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        r = torch.from_numpy(validate_roles(roles, len(texts)))
        flat, offsets = pack([self.vocab.encode(t) for t in texts])
        mask = context_mask(roles, contexts)
        if not mask.any():
            return self.net(flat, offsets, r)
        cflat, coffsets = pack([self.vocab.encode(c) if m else [] for c, m in zip(contexts, mask, strict=False)])
        return self.net(flat, offsets, r, cflat, coffsets, torch.from_numpy(mask.astype(np.float32)))

    def predict_proba(self, texts: Sequence[str], roles: Sequence[str],
                      contexts: Sequence[str | None] | None = None) -> dict[str, np.ndarray]:
        """Row by row, so a text's output never depends on its batch (as the teacher)."""
        validate_roles(roles, len(texts))
        context_mask(roles, contexts)
        cs = list(contexts) if contexts is not None else [None] * len(texts)
        rows = []
        with torch.inference_mode():
            for t, r, c in zip(texts, roles, cs, strict=True):
                rows.append(_probabilities(*self.logits([t], [r], [c])))
        if not rows:
            return {"unsafe": np.zeros(0), "topics": np.zeros((0, N_TOPICS)),
                    "severity_ge": np.zeros((0, N_TOPICS, MAX_SEVERITY)), "severity": np.zeros((0, N_TOPICS), int)}
        return {k: np.concatenate([x[k] for x in rows]) for k in rows[0]}

    def predict_proba_batched(self, texts: Sequence[str], roles: Sequence[str],
                              contexts: Sequence[str | None] | None = None) -> dict[str, np.ndarray]:
        """One batched forward: faster for many texts; may differ from predict_proba in the last bits."""
        with torch.inference_mode():
            return _probabilities(*self.logits(texts, roles, contexts))


# ------------------------------------------------------------------------------------------------ training
@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 30
    batch_size: int = 32
    lr: float = 5e-3
    weight_decay: float = 0.01
    warmup_fraction: float = 0.1
    max_norm: float = 1.0
    aux_weight: float = 0.5
    seed: int = 0


@dataclass
class DistillData:
    """Encoded training set: ids per text, role bits, hard labels, teacher soft labels and aux targets."""

    ids: list[list[int]]
    roles: np.ndarray       # [N] float 0/1
    hard: np.ndarray        # [N] int 0/1
    soft: np.ndarray        # [N] teacher P(unsafe)
    t_topics: np.ndarray    # [N, 11]
    t_sev_ge: np.ndarray    # [N, 11, 4]
    ctx_ids: list[list[int]] | None = None   # ids of each row's prompt context ([] when none)
    has_ctx: np.ndarray | None = None        # [N] float 0/1


class StudentTrainer:
    """Deterministic: initial weights from `seed`; epoch e samples (class-balanced, with replacement) with the
    generator seeded (seed, e). Checkpoint with state() / load_state()."""

    def __init__(self, vocab: Vocabulary, cfg: StudentConfig, tc: TrainConfig, n_train: int):
        self.vocab, self.cfg, self.tc = vocab, cfg, tc
        with torch.random.fork_rng():
            torch.manual_seed(tc.seed)
            self.net = StudentNet(vocab.size, cfg)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
        steps = max(1, tc.epochs * math.ceil(n_train / tc.batch_size))
        warm = max(1, int(tc.warmup_fraction * steps))
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: (s + 1) / warm if s < warm else max(0.0, (steps - s) / max(1, steps - warm)))

    def _order(self, hard: np.ndarray, epoch: int) -> np.ndarray:
        counts = np.bincount(hard, minlength=2).astype(np.float64)
        w = torch.from_numpy(1.0 / np.maximum(counts, 1.0)[hard])
        g = torch.Generator().manual_seed(self.tc.seed * 1_000_003 + epoch)
        return torch.multinomial(w, len(hard), replacement=True, generator=g).numpy()

    def train_epoch(self, d: DistillData, epoch: int) -> float:
        self.net.train()
        order = self._order(d.hard, epoch)
        total = 0.0
        for k in range(0, len(order), self.tc.batch_size):
            idx = order[k:k + self.tc.batch_size]
            flat, offsets = pack([d.ids[i] for i in idx])
            if d.ctx_ids is not None and d.has_ctx is not None and d.has_ctx[idx].any():
                cflat, coffsets = pack([d.ctx_ids[i] for i in idx])
                u, t, s = self.net(flat, offsets, torch.from_numpy(d.roles[idx]), cflat, coffsets,
                                   torch.from_numpy(d.has_ctx[idx]))
            else:
                u, t, s = self.net(flat, offsets, torch.from_numpy(d.roles[idx]))
            loss = harmaug_loss(u, torch.from_numpy(d.hard[idx]), torch.from_numpy(d.soft[idx]).float())
            if self.tc.aux_weight:
                loss = loss + self.tc.aux_weight * aux_loss(t, s, torch.from_numpy(d.t_topics[idx]),
                                                            torch.from_numpy(d.t_sev_ge[idx]))
            self.opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(self.net.parameters(), self.tc.max_norm)
            self.opt.step()
            self.sched.step()
            total += float(loss.detach()) * len(idx)
        self.net.eval()
        return total / max(1, len(order))

    def state(self) -> dict[str, Any]:
        return {"net": {k: v.detach().clone() for k, v in self.net.state_dict().items()},
                "opt": self.opt.state_dict(), "sched": self.sched.state_dict()}

    def load_state(self, st: dict[str, Any]) -> None:
        self.net.load_state_dict(st["net"])
        self.opt.load_state_dict(st["opt"])
        self.sched.load_state_dict(st["sched"])

    def to_student(self, config: dict[str, Any] | None = None) -> StudentGuard:
        return StudentGuard(self.vocab, self.net, self.cfg, config)


def encode_data(vocab: Vocabulary, texts: Sequence[str], roles: Sequence[str], hard: np.ndarray,
                teacher: dict[str, np.ndarray], contexts: Sequence[str | None] | None = None) -> DistillData:
    mask = context_mask(roles, contexts)
    ctx_ids = [vocab.encode(c) if m else [] for c, m in zip(contexts, mask, strict=False)] if mask.any() else None
    return DistillData(ids=[vocab.encode(t) for t in texts], roles=validate_roles(roles, len(texts)).astype(np.float32),
                       hard=np.asarray(hard, dtype=np.int64), soft=np.asarray(teacher["unsafe"], dtype=np.float64),
                       t_topics=np.asarray(teacher["topics"], dtype=np.float32),
                       t_sev_ge=np.asarray(teacher["severity_ge"], dtype=np.float32),
                       ctx_ids=ctx_ids, has_ctx=mask.astype(np.float32) if mask.any() else None)


def train_student(texts: Sequence[str], roles: Sequence[str], hard: np.ndarray, teacher: dict[str, np.ndarray],
                  cfg: StudentConfig, tc: TrainConfig, contexts: Sequence[str | None] | None = None) -> StudentGuard:
    """Convenience (benchmarks, tests): vocabulary from `texts`, then tc.epochs epochs, no checkpoints."""
    vocab = Vocabulary.build(texts, buckets=cfg.buckets, min_count=cfg.min_count, max_size=cfg.max_vocab)
    d = encode_data(vocab, texts, roles, hard, teacher, contexts)
    tr = StudentTrainer(vocab, cfg, tc, len(texts))
    for e in range(tc.epochs):
        tr.train_epoch(d, e)
    return tr.to_student()


# ------------------------------------------------------------------------------------------------ augmentation
RECOMBINED_SOURCE = "recombined"


def recombine_pairs(rows: Sequence[Any], n: int, *, seed: int) -> list[Any]:
    """Up to n (request, reply) pairs that are not in `rows`: a training request (a prompt row's text, or a response
    row's prompt) crossed with a training reply (any response row's text: compliant replies, shared openers,
    refusals), drawn uniformly without replacement (seeded). Recombination, not generation: a cheap stand-in for
    HarmAug's LLM-written pairs that still shows the student the teacher's verdict on a reply after requests it was
    never written for -- the labels come from the teacher. -> augment.AugmentedText responses (source "recombined")."""
    import random

    from services.moderation.augment import AugmentedText

    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidArgument("params.cross_pairs", "must be a non-negative integer")
    requests = sorted({r.text for r in rows if r.role == "prompt"}
                      | {r.prompt for r in rows if r.role == "response" and r.prompt})
    replies = sorted({r.text for r in rows if r.role == "response"})
    seen = {(r.prompt, r.text) for r in rows if r.role == "response" and r.prompt}
    n = min(n, len(requests) * len(replies) - len(seen))   # every seen pair is one of the cells
    rng = random.Random(seed)
    if n * 2 >= len(requests) * len(replies):   # dense: enumerate, then draw
        cand = [(q, a) for q in requests for a in replies if (q, a) not in seen]
        picked = rng.sample(cand, n)
    else:                                        # sparse: rejection sampling (at most half the cells taken)
        picked, used = [], set(seen)
        while len(picked) < n:
            qa = (requests[rng.randrange(len(requests))], replies[rng.randrange(len(replies))])
            if qa not in used:
                used.add(qa)
                picked.append(qa)
    return [AugmentedText(a, "response", RECOMBINED_SOURCE, q) for q, a in picked]
