"""Answers from retrieved documents: standard RAG, Speculative RAG and Sparse RAG over the local engine's models.

- standard_rag: every retrieved passage in one prompt, greedy answer through the engine (the baseline).
- speculative_rag (Wang et al. 2024, "Speculative RAG"): the passages' MiniLM embeddings are clustered by k-means into
  k clusters; m unique subsets are drawn with one passage per cluster; the drafter writes one draft per subset
  (rationale beta, then answer alpha, as the paper's drafter does), all m submitted to the engine together so its
  continuous batching decodes them in the same steps; the verifier scores each draft in one batched forward pass over
  [Q, alpha, beta, R, "Yes"] with R = "Do you think the explanation supports the answers? (Yes or No)":
  rho_SC = prod P(tokens of alpha and beta), rho_SR = P("Yes"); the answer is argmax rho_Draft * rho_SC * rho_SR.
  rho_Draft is the paper's P(beta | Q, delta) + P(alpha | Q, delta, beta) from the drafter's own token logprobs.
  Simplification: the drafter is any registered model (the paper instruction-tunes a specialist drafter); with a
  base model it is prompted with one worked example.
- sparse_rag (Zhu et al. 2024, "Sparse RAG"): a shared preamble is prefilled once; every passage's KV cache is then
  prefilled in one pass in which each passage attends to the preamble and itself only (no cross-passage attention),
  at the positions it has in the concatenated prompt; each passage is rated by the model (a rating prompt attending to
  the preamble and that passage only: relevance = P(" Yes") / (P(" Yes") + P(" No"))); the question and every decoded
  token attend to the preamble and the kept passages' caches only. The paper's control tokens are unpublished and
  its model is trained to emit them: here the rating is a prompt to the unmodified model (a stand-in, said so).
  The forward runs on the engine adapter's own modules (embeddings, q/k/v with RoPE and QK-norm, output and MLP
  blocks, final norm: Llama, GPT-2 and Gemma 3 with its sliding-window layers) with an explicit attention mask, so
  it needs no model-specific mask support from transformers.

Domain code: no grpc. Every function takes an services.generation.engine.Engine (model, tokenizer, adapter)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from services.common.errors import InvalidArgument

INSTRUCTION = "Answer each question with a short phrase taken from the documents.\n\n"
# two worked examples for a base model (one answer in one document, one spread over two)
EXAMPLES = [(["Ilse Brandt was born in the village of Hollum.", "Jonas Brandt was born in the village of Dorne."],
             "In which village was Ilse Brandt born?", "Hollum", "Document [1] says Ilse Brandt was born in Hollum."),
            (["The bakery Sunrise is run by Petra Lind.", "Petra Lind lives in the city of Aster.",
              "The city of Orla has a large harbour."],
             "In which city does the person who runs the bakery Sunrise live?", "Aster",
             "Document [1] says Petra Lind runs the bakery Sunrise; document [2] says Petra Lind lives in Aster.")]
REFLECTION = "Do you think the explanation supports the answers? (Yes or No)"
RATE_PROMPT = "Is the document above relevant to the question? (Yes or No)"
STOPS = ("\n\n", "\nQuestion", "\nDocument")


@dataclass
class Passage:
    doc_id: str
    text: str
    title: str = ""
    embedding: np.ndarray | None = None


@dataclass
class DraftScore:
    doc_ids: list[str]
    answer: str
    rationale: str
    log_draft: float
    log_sc: float
    log_sr: float

    @property
    def log_score(self) -> float:
        return self.log_draft + self.log_sc + self.log_sr


@dataclass
class Rating:
    doc_id: str
    relevance: float
    kept: bool


@dataclass
class RagResult:
    answer: str
    used: list[str]
    drafts: list[DraftScore] = field(default_factory=list)
    ratings: list[Rating] = field(default_factory=list)
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


def _doc_line(i: int, p: Passage) -> str:
    body = f"{p.title}. {p.text}" if p.title else p.text
    return f"Document [{i}]: {' '.join(body.split())}\n"


def _example(rationale: bool) -> str:
    out = ""
    for docs_, q, a, why in EXAMPLES:
        docs = "".join(_doc_line(i + 1, Passage("", t)) for i, t in enumerate(docs_))
        out += (f"{docs}Question: {q}\nRationale: {why}\nAnswer: {a}\n\n" if rationale else
                f"{docs}Question: {q}\nAnswer: {a}\n\n")
    return out


def standard_prompt(question: str, passages: Sequence[Passage]) -> str:
    docs = "".join(_doc_line(i + 1, p) for i, p in enumerate(passages))
    return f"{INSTRUCTION}{_example(False)}{docs}Question: {question}\nAnswer:"


def draft_prompt(question: str, passages: Sequence[Passage]) -> str:
    docs = "".join(_doc_line(i + 1, p) for i, p in enumerate(passages))
    return f"{INSTRUCTION}{_example(True)}{docs}Question: {question}\nRationale:"


def first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0].strip()


def _run(engine, prompts: Sequence[list[int]], max_new_tokens: int, stop: tuple[str, ...] = STOPS,
         timeout: float = 600) -> list[tuple[list[Any], Any]]:
    """Every prompt decoded together by the engine's continuous batching, greedy: (token events, Finished) each."""
    from services.generation.engine import SamplingParams

    sp = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, stop=stop)
    return engine.generate_many(list(prompts), sp, timeout=timeout)


# ------------------------------------------------------------------------------------------------ standard
def standard_rag(engine, question: str, passages: Sequence[Passage], max_new_tokens: int = 32) -> RagResult:
    t0 = time.perf_counter()
    ids = engine.encode(standard_prompt(question, passages))
    (_, fin), = _run(engine, [ids], max_new_tokens)
    return RagResult(first_line(fin.text), [p.doc_id for p in passages], seconds=time.perf_counter() - t0,
                     info={"prompt_tokens": len(ids)})


# ------------------------------------------------------------------------------------------------ speculative
def kmeans_subsets(emb: np.ndarray, k: int, m: int, seed: int = 0) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """(subsets, labels): k-means (k clusters) of the rows of emb, then up to m unique subsets, each with exactly one
    row from every cluster (a uniform draw per cluster; duplicates redrawn; all combinations when there are fewer
    than m). Subsets are sorted tuples of row indices."""
    from sklearn.cluster import KMeans

    n = emb.shape[0]
    k = max(1, min(k, n))
    labels = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(emb).labels_ if k > 1 else np.zeros(n, int)
    clusters = [np.flatnonzero(labels == c) for c in range(k)]
    clusters = [c for c in clusters if len(c)]
    total = math.prod(len(c) for c in clusters)
    rng = np.random.default_rng(seed)
    subsets: list[tuple[int, ...]] = []
    seen: set[tuple[int, ...]] = set()
    if total <= m:
        import itertools
        subsets = [tuple(sorted(int(i) for i in combo)) for combo in itertools.product(*clusters)]
        return subsets, labels
    while len(subsets) < m:
        s = tuple(sorted(int(rng.choice(c)) for c in clusters))
        if s not in seen:
            seen.add(s)
            subsets.append(s)
    return subsets, labels


def parse_draft(text: str) -> tuple[str, str]:
    """(rationale, answer) of a draft 'rationale\\nAnswer: answer'."""
    head, sep, tail = text.partition("\nAnswer:")
    if not sep:
        return text.strip(), first_line(text)
    return head.strip(), first_line(tail)


def _draft_logs(engine, events, fin) -> tuple[float, float]:
    """(log P(beta | Q, delta), log P(alpha | Q, delta, beta)) from the drafter's token logprobs: tokens up to the
    one that completes '\\nAnswer:' are the rationale's, the rest the answer's."""
    ids = fin.token_ids
    lps = [e.logprob for e in events][:len(ids)]
    cut = len(ids)
    for t in range(len(ids)):
        if "\nAnswer:" in engine.tokenizer.decode(ids[:t + 1], skip_special_tokens=True):
            cut = t + 1
            break
    return float(sum(lps[:cut])), float(sum(lps[cut:]))


def verifier_segments(tokenizer, question: str, answer: str, rationale: str) -> list[tuple[str, list[int]]]:
    """The verifier's input [Q, alpha, beta, R, "Yes"] as labelled token segments (each tokenised alone, so each
    segment's tokens are exactly known)."""
    def enc(s: str) -> list[int]:
        return list(tokenizer(s, add_special_tokens=False)["input_ids"])
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    return [("q", bos + enc(f"Question: {question}\nAnswer:")), ("alpha", enc(" " + answer)),
            ("sep", enc("\nExplanation:")), ("beta", enc(" " + rationale)), ("r", enc("\n" + REFLECTION + "\n")),
            ("yes", enc("Yes"))]


@torch.inference_mode()
def verify(model, tokenizer, question: str, drafts: Sequence[tuple[str, str]]) -> list[tuple[float, float]]:
    """(log rho_SC, log rho_SR) of each (answer, rationale) in ONE batched forward pass of the verifier (right
    padding): log rho_SC = sum of log P(token) over the tokens of alpha and beta, log rho_SR = log P("Yes") (summed
    over its tokens should "Yes" be more than one)."""
    segs = [verifier_segments(tokenizer, question, a, b) for a, b in drafts]
    seqs = [[t for _, ids in s for t in ids] for s in segs]
    T = max(len(s) for s in seqs)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    # the vocabulary projection only at the rows that predict a scored token (Gemma: 262k x 640 per row)
    want: list[tuple[int, int, int, str]] = []  # (row, position predicting, token, term)
    for i, s in enumerate(segs):
        at = 0
        for name, tok in s:
            for j, t in enumerate(tok):
                if at + j > 0 and name in ("alpha", "beta", "yes"):
                    want.append((i, at + j - 1, t, name))
            at += len(tok)
    hidden = model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    rows = hidden[torch.tensor([w[0] for w in want]), torch.tensor([w[1] for w in want])]
    logits = model.get_output_embeddings()(rows).float()
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    lp = torch.log_softmax(logits, dim=-1)[torch.arange(len(want)), torch.tensor([w[2] for w in want])].tolist()
    out = [[0.0, 0.0] for _ in segs]
    for (i, _, _, name), x in zip(want, lp, strict=True):
        out[i][1 if name == "yes" else 0] += x
    return [(a, b) for a, b in out]


def speculative_rag(drafter, verifier_model, verifier_tokenizer, question: str, passages: Sequence[Passage], *,
                    m: int = 5, k: int = 2, seed: int = 0, max_new_tokens: int = 48) -> RagResult:
    """Speculative RAG over the retrieved passages (their .embedding set). drafter: an Engine; the verifier: a model
    and its tokenizer (the verifier's engine's, typically)."""
    t0 = time.perf_counter()
    if any(p.embedding is None for p in passages):
        raise InvalidArgument("passages", "Speculative RAG clusters the passages' embeddings: every one needs one")
    emb = np.stack([p.embedding for p in passages]).astype(np.float32)
    subsets, labels = kmeans_subsets(emb, k, m, seed)
    prompts = [drafter.encode(draft_prompt(question, [passages[i] for i in s])) for s in subsets]
    steps0 = drafter.steps
    t1 = time.perf_counter()
    results = _run(drafter, prompts, max_new_tokens)
    t_draft = time.perf_counter() - t1
    steps = drafter.steps - steps0
    parsed = []
    for events, fin in results:
        rationale, answer = parse_draft(fin.text)
        lb, la = _draft_logs(drafter, events, fin)
        parsed.append((answer, rationale, float(np.logaddexp(lb, la))))  # log(P(beta|.) + P(alpha|., beta))
    scores = verify(verifier_model, verifier_tokenizer, question, [(a, b) for a, b, _ in parsed])
    drafts = [DraftScore([passages[i].doc_id for i in s], a, b, ld, sc, sr)
              for s, (a, b, ld), (sc, sr) in zip(subsets, parsed, scores, strict=True)]
    best = max(range(len(drafts)), key=lambda j: drafts[j].log_score)
    order = [best] + [j for j in range(len(drafts)) if j != best]
    info = {"subsets": subsets, "labels": labels.tolist(), "draft_steps": steps, "draft_seconds": t_draft,
            "completion_tokens": [fin.completion_tokens for _, fin in results]}
    return RagResult(drafts[best].answer, drafts[best].doc_ids, [drafts[j] for j in order],
                     seconds=time.perf_counter() - t0, info=info)


# ------------------------------------------------------------------------------------------------ sparse
@dataclass
class Segment:
    """Tokens with their positions and KV per layer ([Hkv, n, D] each)."""

    ids: list[int]
    pos: list[int]
    k: list[torch.Tensor]
    v: list[torch.Tensor]


def forward(adapter, ids: Sequence[int], pos: Sequence[int], ctx_k: list[torch.Tensor], ctx_v: list[torch.Tensor],
            ctx_pos: torch.Tensor, allowed: torch.Tensor, *, logits_rows: Sequence[int] | None = None,
            want_weights: bool = False):
    """Run T new tokens through the model's layers (the engine adapter's modules) attending to context keys/values
    ctx_k/ctx_v (per layer [Hkv, n, D], positions ctx_pos [n]) and to each other, as `allowed` [T, n + T] (bool)
    says; a sliding-window layer further masks keys at positions <= p - W for the query at p.
    Returns (logits [len(logits_rows), V] or None, new keys per layer [Hkv, T, D], new values, attention weights
    per layer [H, T, n + T] if want_weights)."""
    a = adapter
    ids_t = torch.tensor(list(ids), dtype=torch.long)
    pos_t = torch.tensor(list(pos), dtype=torch.long)
    T = len(ids_t)
    h, extra = a.embed(ids_t, pos_t)                 # [T, 1, E]
    kpos = torch.cat([ctx_pos, pos_t])
    new_k, new_v, weights = [], [], []
    for l_ in range(a.L):
        q, k, v = a.qkv(l_, h, extra)                # q [T, H, 1, D]; k, v [T, Hkv, 1, D]
        kc, vc = k[:, :, 0].transpose(0, 1), v[:, :, 0].transpose(0, 1)   # [Hkv, T, D]
        new_k.append(kc)
        new_v.append(vc)
        keys = torch.cat([ctx_k[l_], kc], dim=1) if ctx_k else kc
        vals = torch.cat([ctx_v[l_], vc], dim=1) if ctx_v else vc
        mask = allowed
        if a.windows[l_] is not None:
            mask = mask & (kpos[None, :] > pos_t[:, None] - a.windows[l_])
        H, Hkv = q.shape[1], keys.shape[0]
        g = H // Hkv
        qh = q[:, :, 0].transpose(0, 1)                               # [H, T, D]
        kh = keys.repeat_interleave(g, dim=0)                          # [H, n+T, D]
        vh = vals.repeat_interleave(g, dim=0)
        s = (qh @ kh.transpose(1, 2)).float() * a.scale_of(l_)
        s = s.masked_fill(~mask[None], float("-inf"))
        w = torch.softmax(s, dim=-1)
        if want_weights:
            weights.append(w)
        o = (w.to(vh.dtype) @ vh).transpose(0, 1).reshape(T, 1, -1)    # [T, 1, H*D]
        h = a.finish_layer(l_, h, o)
    logits = None
    if logits_rows is not None and len(logits_rows):
        logits = a.logits(h[list(logits_rows)])
    return logits, new_k, new_v, weights


def _cat(parts: Sequence[Segment], L: int) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    ks = [torch.cat([p.k[l_] for p in parts], dim=1) for l_ in range(L)]
    vs = [torch.cat([p.v[l_] for p in parts], dim=1) for l_ in range(L)]
    return ks, vs, torch.tensor([x for p in parts for x in p.pos], dtype=torch.long)


def _block_mask(lengths: Sequence[int], ctx: int) -> torch.Tensor:
    """[T, ctx + T]: every query sees the ctx context tokens, and causally the tokens of its own block only."""
    T = sum(lengths)
    m = torch.zeros((T, ctx + T), dtype=torch.bool)
    m[:, :ctx] = True
    at = 0
    for n in lengths:
        m[at:at + n, ctx + at:ctx + at + n] = torch.tril(torch.ones((n, n), dtype=torch.bool))
        at += n
    return m


def sparse_segments(engine, question: str, passages: Sequence[Passage]) -> tuple[list[int], list[list[int]],
                                                                                  list[int]]:
    """Token ids of the preamble (BOS, instruction, worked example), of each passage, and of the question: the
    standard prompt's text, each piece tokenised alone."""
    tok = engine.tokenizer

    def enc(s: str) -> list[int]:
        return list(tok(s, add_special_tokens=False)["input_ids"])
    pre = engine.encode(INSTRUCTION + _example(False))
    docs = [enc(_doc_line(i + 1, p)) for i, p in enumerate(passages)]
    return pre, docs, enc(f"Question: {question}\nAnswer:")


def _first_difference(tok, a: str, b: str, prompt: list[int]) -> tuple[int, int]:
    """The first tokens where the tokenisations of a and b differ; their common prefix is appended to prompt (a
    tokenizer may split " Yes" and " No" into a shared space and the words)."""
    ia = tok(a, add_special_tokens=False)["input_ids"]
    ib = tok(b, add_special_tokens=False)["input_ids"]
    c = 0
    while c < min(len(ia), len(ib)) - 1 and ia[c] == ib[c]:
        c += 1
    prompt.extend(ia[:c])
    return ia[c], ib[c]


@torch.inference_mode()
def sparse_rag(engine, question: str, passages: Sequence[Passage], *, threshold: float = 0.5,
               max_new_tokens: int = 32, keep: Sequence[bool] | None = None, trace: dict | None = None) -> RagResult:
    """Sparse RAG (see the module docstring). keep overrides the rating's choice (tests: every passage kept). trace,
    if given, receives the attention weights of the question's and decoded tokens per layer and the key segments."""
    t0 = time.perf_counter()
    a = engine.adapter
    tok = engine.tokenizer
    pre, docs, qids = sparse_segments(engine, question, passages)
    L = a.L
    # 1. the preamble, once
    _, k0, v0, _ = forward(a, pre, range(len(pre)), [], [], torch.empty(0, dtype=torch.long),
                           _block_mask([len(pre)], 0))
    preamble = Segment(pre, list(range(len(pre))), k0, v0)
    # 2. every passage in one pass, each attending to the preamble and itself, at its position in the full prompt
    starts, at = [], len(pre)
    for d in docs:
        starts.append(at)
        at += len(d)
    q_start = at
    flat = [t for d in docs for t in d]
    dpos = [s + j for s, d in zip(starts, docs, strict=True) for j in range(len(d))]
    ck, cv, cpos = _cat([preamble], L)
    _, dk, dv, _ = forward(a, flat, dpos, ck, cv, cpos, _block_mask([len(d) for d in docs], len(pre)))
    segs, off = [], 0
    for d, s in zip(docs, starts, strict=True):
        segs.append(Segment(d, list(range(s, s + len(d))), [x[:, off:off + len(d)] for x in dk],
                            [x[:, off:off + len(d)] for x in dv]))
        off += len(d)
    # 3. a relevance rating per passage: a prompt attending to the preamble and that passage only
    ratings: list[float] = []
    if keep is None:
        rate = list(tok(f"Question: {question}\n{RATE_PROMPT}\nAnswer:", add_special_tokens=False)["input_ids"])
        yes, no = _first_difference(tok, " Yes", " No", rate)
        n_ctx = len(pre) + len(flat)
        ck, cv, cpos = _cat([preamble, *segs], L)
        allowed = torch.zeros((len(rate) * len(docs), n_ctx + len(rate) * len(docs)), dtype=torch.bool)
        allowed[:, :len(pre)] = True
        r_ids, r_pos, rows = [], [], []
        for i, seg in enumerate(segs):
            r0 = i * len(rate)
            a0 = len(pre) + (seg.pos[0] - len(pre))
            allowed[r0:r0 + len(rate), a0:a0 + len(seg.ids)] = True
            allowed[r0:r0 + len(rate), n_ctx + r0:n_ctx + r0 + len(rate)] = torch.tril(
                torch.ones((len(rate), len(rate)), dtype=torch.bool))
            r_ids += rate
            r_pos += list(range(seg.pos[-1] + 1, seg.pos[-1] + 1 + len(rate)))
            rows.append(r0 + len(rate) - 1)
        lg, _, _, _ = forward(a, r_ids, r_pos, ck, cv, cpos, allowed, logits_rows=rows)
        two = torch.softmax(lg[:, [yes, no]].float(), dim=-1)[:, 0]
        ratings = two.tolist()
        best = int(np.argmax(ratings))
        keep = [r >= threshold or i == best for i, r in enumerate(ratings)]
    kept = [s for s, kk in zip(segs, keep, strict=True) if kk]
    # 4. the question and the answer attend to the preamble and the kept passages' caches only
    ctx = [preamble, *kept]
    ck, cv, cpos = _cat(ctx, L)
    n = int(cpos.numel())
    allowed = torch.ones((len(qids), n + len(qids)), dtype=torch.bool)
    allowed[:, n:] = torch.tril(torch.ones((len(qids), len(qids)), dtype=torch.bool))
    qpos = list(range(q_start, q_start + len(qids)))
    want = trace is not None
    lg, qk, qv, w = forward(a, qids, qpos, ck, cv, cpos, allowed, logits_rows=[len(qids) - 1], want_weights=want)
    if want:
        trace["weights"] = [w]
        trace["context_positions"] = cpos.tolist()
        trace["dropped_positions"] = [x for s, kk in zip(segs, keep, strict=True) if not kk for x in s.pos]
    ck = [torch.cat([x, y], dim=1) for x, y in zip(ck, qk, strict=True)]
    cv = [torch.cat([x, y], dim=1) for x, y in zip(cv, qv, strict=True)]
    cpos = torch.cat([cpos, torch.tensor(qpos)])
    out: list[int] = []
    logits_seq = [lg[0]]
    p = q_start + len(qids)
    eos = engine.eos_ids
    text = ""
    for _ in range(max_new_tokens):
        t = int(torch.argmax(logits_seq[-1]))
        if t in eos:
            break
        out.append(t)
        text = tok.decode(out, skip_special_tokens=True)
        if any(s in text for s in STOPS) or "\n" in text.lstrip("\n ") or len(out) >= max_new_tokens:
            break
        one = torch.ones((1, cpos.numel() + 1), dtype=torch.bool)
        lg, nk, nv, w = forward(a, [t], [p], ck, cv, cpos, one, logits_rows=[0], want_weights=want)
        if want:
            trace["weights"].append(w)
        ck = [torch.cat([x, y], dim=1) for x, y in zip(ck, nk, strict=True)]
        cv = [torch.cat([x, y], dim=1) for x, y in zip(cv, nv, strict=True)]
        cpos = torch.cat([cpos, torch.tensor([p])])
        p += 1
        logits_seq.append(lg[0])
    if trace is not None:
        trace["token_ids"] = out
        trace["logits"] = torch.stack(logits_seq)
    used = [pp.doc_id for pp, kk in zip(passages, keep, strict=True) if kk]
    rated = [Rating(pp.doc_id, float(ratings[i]) if ratings else 1.0, bool(keep[i])) for i, pp in enumerate(passages)]
    return RagResult(first_line(text), used, ratings=rated, seconds=time.perf_counter() - t0,
                     info={"kept_tokens": n, "all_tokens": len(pre) + len(flat)})


@torch.inference_mode()
def block_diagonal_reference(model, pre: list[int], docs: list[list[int]], qids: list[int],
                             max_new_tokens: int, eos: set[int]) -> tuple[list[int], torch.Tensor]:
    """Standard RAG run through the transformers model's own forward on the whole prompt [preamble, passages...,
    question] with the block-diagonal attention mask (a passage sees the preamble and itself; the question and the
    answer see everything), greedy, recomputing the whole sequence at every token (no cache): the reference that
    Sparse RAG with every passage kept must equal. Returns (tokens, logits of each step)."""
    seq = pre + [t for d in docs for t in d] + qids
    n_pre = len(pre)
    out, logits_seq = [], []
    for _ in range(max_new_tokens):
        T = len(seq)
        allow = torch.tril(torch.ones((T, T), dtype=torch.bool))
        at = n_pre
        for d in docs:  # a passage's rows see only the preamble and its own block
            allow[at:at + len(d), n_pre:at] = False
            at += len(d)
        mask = torch.zeros((1, 1, T, T), dtype=model.dtype).masked_fill(~allow, torch.finfo(model.dtype).min)
        lg = model(input_ids=torch.tensor([seq]), attention_mask=mask).logits[0, -1].float()
        logits_seq.append(lg)
        t = int(torch.argmax(lg))
        if t in eos:
            break
        out.append(t)
        seq = seq + [t]
    return out, torch.stack(logits_seq)
