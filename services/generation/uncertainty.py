"""Semantic uncertainty of an answer: SDLG (Aichberger et al., "Semantically Diverse Language Generation for
Uncertainty Estimation in Language Models", github ml-jku/SDLG) and its baselines, in one code path.

estimate(lm, tokenizer, nli, prompt, question, Options(method=...)):
1. The initial answer by beam search (num_beams 5, as the repo's most_likely generation), scored by the LM (its
   per-position next-token distributions are kept for SDLG's importance score).
2. Generations, N of them besides the initial answer (the repo adds N = num_total_generations to the initial one,
   for SDLG and for the baseline alike):
   - "sdlg": `rank_substitutions` (the repo's algorithm 2): the NLI model scores [question + answer] against itself
     toward "contradiction"; the cross-entropy is backpropagated to its input token embeddings. Per answer word:
     attribution = || mean over the word's NLI tokens of |grad * emb| ||; per candidate LM token v at the word's
     first LM token (LM probability > token_prob_threshold = 0.001, v != the original): substitution =
     cos(E[orig] - E[v], grad at the word's first NLI token), importance = p_LM(v | prefix). Each score is turned
     into a dense descending rank; triples are sorted by alphas . ranks (1/3 each: the mean rank), ties in list order.
     Then (algorithm 1) the ranking is walked: prefix + v continued by beam search (5 beams) until N alternatives
     exist; a v that ends the answer (a stop token) gives prefix + v, except at the first word. A one-word answer is
     ranked by importance alone (as in the repo).
     Where this differs from the repo: the repo's DeBERTa and OPT share one BPE vocabulary, so it indexes DeBERTa's
     embedding matrix by OPT token ids; here the LM and the NLI model tokenise differently, so E[v] is the mean NLI
     input embedding of the word pieces of v's decoded text, and words are matched between the two tokenisations
     by character offsets. The repo's alternatives also go into the gradient batch of later calls; it calls the
     ranking once with none, which is what is done here.
   - "multinomial", "predictive", "lexical": N samples at temperature 1 (the repo's baseline), the same scoring.
3. Semantic clusters: NLI in both directions on (question + a_i, question + a_j); a pair is equivalent when neither
   direction predicts contradiction; the repo's greedy assignment (identical lower-cased text joins at once).
4. Semantic entropy (the repo's compute_semantic_entropy, mc_estimate_over_clusters=False): log p~(y) = -NLL(y|x)
   (length-normalised by default: the repo's "normalised" entropy) + log w; cluster log-mass = logsumexp over its
   members; SE = -sum_c softmax(lp)_c lp_c. Weights: SDLG w = L1-normalise([1, p(v_1), ..., p(v_N)]); baselines
   w = 1 (the repo's analysis notebook).
   Other scores over the same samples: predictive entropy = -mean_i log p(y_i|x) (length-normalised likewise) and
   lexical similarity = mean pairwise ROUGE-L F1 of the answers (the score reported is 1 - it, so that higher is
   more uncertain for every method).

A model served by an OpenAI-compatible server (services.generation.remote) runs the same code path through RemoteLM:
beam search, sampling and SDLG's importance scores from the completions API's token logprobs and top-20
alternatives; what that approximates (SDLG's candidates are those among the top 20; prefixes travel as text; tokens
are known by their text) is said in RemoteLM's docstring. Where the top 20 hold every candidate and the texts
re-encode to their tokens, it equals the local estimate (tests/generation/test_uncertainty_remote.py).

The NLI model is any services.generation.nli.NLIModel: a registered DeBERTa-MNLI where users have one, here the
MiniLM NLI head (a stand-in for DeBERTa-MNLI)."""
from __future__ import annotations

import copy
import math
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

METHODS = ("sdlg", "multinomial", "predictive", "lexical")


@dataclass(frozen=True)
class Options:
    method: str = "sdlg"
    n: int = 5                           # generations besides the initial answer
    max_new_tokens: int = 24
    num_beams: int = 5
    token_prob_threshold: float = 0.001
    temperature: float = 1.0             # the baselines' sampling temperature
    seed: int = 0
    stop: tuple[str, ...] = ("\n",)
    alphas: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)
    length_normalised: bool = True
    max_candidates: int = 200            # at most this many ranked substitutions are tried (the repo: all)
    remote_top_logprobs: int = 20        # a remote model: top alternatives asked per step (RemoteLM)
    top_logprobs: int = 0                # alternatives reported with each token of the answer (answer_tokens)


@dataclass
class Generation:
    text: str
    ids: list[int]                       # LM token ids after the prompt (stop token included when generated)
    log_likelihood: float = 0.0          # sum of log p over ids
    n_tokens: int = 0
    weight: float = 1.0
    origin: str = "initial"              # initial | substitution | sample
    word_index: int = -1                 # SDLG: the answer word whose first token was replaced
    token_text: str = ""                 # SDLG: the replacing token
    token_probability: float = 0.0       # SDLG: p_LM of the replacing token (its importance score)

    def lp(self, length_normalised: bool = True) -> float:
        return self.log_likelihood / max(self.n_tokens, 1) if length_normalised else self.log_likelihood


@dataclass
class Estimate:
    method: str
    answer: str
    generations: list[Generation]
    cluster_ids: list[int]
    clusters: list[list[int]]            # member indices into generations, cluster order = first member
    cluster_log_mass: list[float]
    score: float                         # the method's uncertainty score (higher: more uncertain)
    semantic_entropy: float | None
    predictive_entropy: float
    lexical_similarity: float
    seconds_generate: float = 0.0
    seconds_cluster: float = 0.0
    lm_calls: int = 0
    extras: dict = field(default_factory=dict)

    @property
    def cluster_mass(self) -> list[float]:
        return torch.softmax(torch.tensor(self.cluster_log_mass, dtype=torch.float64), 0).tolist() \
            if self.cluster_log_mass else []


# ----------------------------------------------------------------------------------------------- closed-form parts
def sdlg_weights(token_probabilities: Sequence[float]) -> list[float]:
    """w = L1-normalise([1, p(v_1), ..., p(v_n)]): the initial answer weighs 1, each alternative its substituted
    token's LM probability."""
    w = [1.0, *[float(p) for p in token_probabilities]]
    s = sum(w)
    return [x / s for x in w]


def semantic_entropy(log_likelihoods: Sequence[float], weights: Sequence[float], cluster_ids: Sequence[int]):
    """(SE, cluster log-masses in order of first appearance): lp = ll + log w; cluster log-mass = logsumexp of its
    members' lp; SE = -sum softmax(lp_c) lp_c (the repo's formula; with masses that sum to 1 this is the Shannon
    entropy of the cluster distribution)."""
    ll = torch.tensor([-1e12 if math.isnan(x) or x == float("-inf") else x for x in log_likelihoods],
                      dtype=torch.float64) + torch.log(torch.tensor(list(weights), dtype=torch.float64))
    order: list[int] = []
    for c in cluster_ids:
        if c not in order:
            order.append(c)
    ids = torch.tensor(list(cluster_ids))
    agg = torch.stack([torch.logsumexp(ll[ids == c], 0) for c in order])
    return float(-(torch.softmax(agg, 0) * agg).sum()), agg.tolist()


def predictive_entropy(log_likelihoods: Sequence[float]) -> float:
    return float(-sum(log_likelihoods) / max(len(log_likelihoods), 1))


def rouge_l(a: str, b: str) -> float:
    """ROUGE-L F1 over lower-cased whitespace words (longest common subsequence)."""
    x, y = a.lower().split(), b.lower().split()
    if not x or not y:
        return float(x == y)
    prev = [0] * (len(y) + 1)
    for xi in x:
        cur = [0]
        for j, yj in enumerate(y):
            cur.append(prev[j] + 1 if xi == yj else max(prev[j + 1], cur[j]))
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    p, r = lcs / len(x), lcs / len(y)
    return 2 * p * r / (p + r)


def lexical_similarity(texts: Sequence[str]) -> float:
    pairs = [(i, j) for i in range(len(texts)) for j in range(i + 1, len(texts))]
    return sum(rouge_l(texts[i], texts[j]) for i, j in pairs) / len(pairs) if pairs else 1.0


def dense_rank(values: Sequence[float], descending: bool = True) -> list[int]:
    """1 for the best value, equal values share a rank, the next distinct value gets the next rank (the repo's
    rank_tensor)."""
    distinct = sorted(set(values), reverse=descending)
    pos = {v: i + 1 for i, v in enumerate(distinct)}
    return [pos[v] for v in values]


def rank_triples(scores: Sequence[tuple[float, float, float]],
                 alphas: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)) -> list[int]:
    """Indices of (attribution, substitution, importance) triples, best first: by alphas . dense ranks (each
    descending), ties in list order."""
    if not scores:
        return []
    ranks = [dense_rank([s[k] for s in scores]) for k in range(3)]
    # rounded: equal rank sums tie exactly whatever the float order of the products
    combined = [round(sum(alphas[k] * ranks[k][i] for k in range(3)), 9) for i in range(len(scores))]
    return sorted(range(len(scores)), key=lambda i: combined[i])


def cluster(texts: Sequence[str], equivalent) -> list[int]:
    """The repo's compute_semantic_clusters: ids start as 0..n-1; for i < j, j takes i's id when its id differs and
    the lower-cased texts are equal or equivalent(i, j) (both NLI directions not contradiction)."""
    ids = list(range(len(texts)))
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            if ids[j] == ids[i]:
                continue
            if texts[i].lower() == texts[j].lower() or equivalent(i, j):
                ids[j] = ids[i]
    return ids


def nli_equivalence(nli, question: str, texts: Sequence[str]):
    """equivalent(i, j) for `cluster`: one batched NLI call over every ordered pair of distinct texts."""
    from services.generation.nli import CONTRADICTION

    pairs = [(i, j) for i in range(len(texts)) for j in range(len(texts))
             if i != j and texts[i].lower() != texts[j].lower()]
    if not pairs:
        return lambda i, j: False
    prem = [f"{question} {texts[i]}" for i, _ in pairs]
    hyp = [f"{question} {texts[j]}" for _, j in pairs]
    pred = dict(zip(pairs, nli.predict(prem, hyp), strict=False))
    return lambda i, j: pred[(i, j)] != CONTRADICTION and pred[(j, i)] != CONTRADICTION


# --------------------------------------------------------------------------------------------------- the LM side
_STOP_CACHE: dict[tuple[int, tuple[str, ...]], frozenset[int]] = {}


def stop_token_ids(tokenizer, stop: Sequence[str]) -> frozenset[int]:
    """Ids of the vocabulary's tokens whose text holds a stop string (SentencePiece "▁" and byte-level "Ġ"/"Ċ" read
    as space and newline), cached per tokenizer: generation ends on them (the repo ends on "." by token id)."""
    key = (id(tokenizer), tuple(stop))
    if key not in _STOP_CACHE:
        stops = [st for st in stop if st]
        out = set()
        if stops:
            for piece, i in tokenizer.get_vocab().items():
                text = piece.replace("\u2581", " ").replace("\u0120", " ").replace("\u010a", "\n")
                if any(st in text for st in stops):
                    out.add(int(i))
        _STOP_CACHE[key] = frozenset(out)
    return _STOP_CACHE[key]


def beam_search(opts: Options, ends, prefix: Sequence[int], prefix_logp: float, first_logp: torch.Tensor,
                advance) -> tuple[list[int], float]:
    """The beam-search loop of LM.beam (transformers' with length_penalty 1 and early_stopping): each step extends
    every live beam by its 2K best tokens, a candidate that ends the answer (ends(token)) goes to the finished set
    with score sum log p / length, the K best others continue; it stops once K are finished, or at max_new_tokens
    (the live beams then count as finished). first_logp [K, V]: the next-token log-probabilities after the prefix
    (the K rows are copies); advance(rows, tokens, live) -> [K, V]: beam i continues row rows[i] with tokens[i] (live
    False: a padding row whose score is -inf, whose distribution is never used). The local LM advances its KV cache,
    the remote one asks the server."""
    k = opts.num_beams
    logp = first_logp
    beams: list[list[int]] = [[] for _ in range(k)]
    scores = torch.full((k,), float("-inf"))
    scores[0] = 0.0  # only the first row is live at the start (the rows are copies)
    finished: list[tuple[float, list[int], float]] = []   # (normalised score, tokens, sum log p)
    budget = max(1, opts.max_new_tokens - len(prefix))
    for t in range(budget):
        total = (scores[:, None] + logp).flatten()
        top = torch.topk(total, min(2 * k, total.numel()))
        nxt_rows, nxt_tok, nxt_beams, nxt_scores = [], [], [], []
        for rank, (s, flat) in enumerate(zip(top.values.tolist(), top.indices.tolist(), strict=False)):
            row, tok = divmod(flat, logp.shape[1])
            if s == float("-inf"):
                break
            if ends(tok):
                if rank < k:
                    seq = [*beams[row], tok]
                    finished.append((s / (len(prefix) + len(seq)), seq, s))
                continue
            nxt_rows.append(row)
            nxt_tok.append(tok)
            nxt_beams.append([*beams[row], tok])
            nxt_scores.append(s)
            if len(nxt_rows) == k:
                break
        if len(finished) >= k or not nxt_rows or t == budget - 1:
            if t == budget - 1 or not nxt_rows:
                finished += [(s / (len(prefix) + len(b)), b, s) for b, s in zip(nxt_beams, nxt_scores, strict=True)]
            break
        live = [True] * len(nxt_rows) + [False] * (k - len(nxt_rows))
        while len(nxt_rows) < k:  # fewer than k continuations: pad with dead rows
            nxt_rows.append(nxt_rows[0])
            nxt_tok.append(nxt_tok[0])
            nxt_beams.append(nxt_beams[0])
            nxt_scores.append(float("-inf"))
        logp = advance(nxt_rows, nxt_tok, live)
        beams, scores = nxt_beams, torch.tensor(nxt_scores)
    best = max(finished, key=lambda f: f[0])
    return [*prefix, *best[1]], prefix_logp + best[2]


def answer_text(decoded: str, stops: Sequence[str]) -> str:
    """A generation's answer: its decoded text up to the first stop string, stripped."""
    for st in stops:
        if st and st in decoded:
            decoded = decoded[:decoded.index(st)]
    return decoded.strip()


class LM:
    """A Hugging Face causal LM + tokenizer with what SDLG needs, all from one prefilled prompt cache (the prompt
    is run through the model once per question; every generation forks its cache): beam search from the prompt or
    from a prefix, multinomial sampling, the initial answer's next-token distributions, and text. Generations carry
    their log-likelihood from the decoding itself (beam score = sum of token log-probabilities; sampling at
    temperature 1 records log p of each drawn token), so no second scoring pass is needed. Beam search is
    beam_search's loop over the forked cache."""

    def __init__(self, model, tokenizer, opts: Options, prompt_ids: Sequence[int]):
        self.model, self.tok, self.opts = model, tokenizer, opts
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos = {int(i) for i in [tokenizer.eos_token_id] if i is not None}
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        self.eos |= {int(i) for i in ([gen_eos] if isinstance(gen_eos, int) else gen_eos or [])}
        self.special = set(getattr(tokenizer, "all_special_ids", [])) | self.eos
        self.stop_ids = stop_token_ids(tokenizer, opts.stop) | self.eos
        self.calls = 0
        self.prompt_ids = list(prompt_ids)
        with torch.no_grad():
            out = model(input_ids=torch.tensor([self.prompt_ids]), use_cache=True, logits_to_keep=1)
        self.cache, self.last_logp = out.cache, torch.log_softmax(out.logits[0, -1].float(), -1)

    def text(self, ids: Sequence[int]) -> str:
        return answer_text(self.tok.decode(list(ids), skip_special_tokens=True), self.opts.stop)

    def ends(self, token_id: int) -> bool:
        """Whether a token ends an answer (an end-of-sequence token, or one whose text holds a stop string)."""
        return token_id in self.stop_ids

    def _fork(self, rows: int):
        cache = copy.deepcopy(self.cache)
        if rows > 1:
            cache.batch_repeat_interleave(rows)
        return cache

    def _step(self, cache, tokens: torch.Tensor) -> torch.Tensor:
        """Feed tokens [B, L] after the cache; log-probabilities [B, L, V]."""
        out = self.model(input_ids=tokens, cache=cache, use_cache=True)
        return torch.log_softmax(out.logits.float(), -1)

    @torch.no_grad()
    def beam(self, prefix: Sequence[int] = (), prefix_logp: float = 0.0) -> tuple[list[int], float]:
        """(answer ids = prefix + continuation, log-likelihood of the whole answer) by beam search; prefix_logp is
        the log-likelihood of the prefix (known to the caller)."""
        self.calls += 1
        k = self.opts.num_beams
        cache = self._fork(k)
        first = self._step(cache, torch.tensor([list(prefix)] * k))[:, -1] if prefix else self.last_logp.expand(k, -1)

        def advance(rows: list[int], tokens: list[int], live: list[bool]) -> torch.Tensor:
            cache.reorder_cache(torch.tensor(rows))
            return self._step(cache, torch.tensor(tokens)[:, None])[:, -1]
        return beam_search(self.opts, self.ends, prefix, prefix_logp, first, advance)

    @torch.no_grad()
    def sample(self, n: int) -> list[tuple[list[int], float]]:
        """n answers by multinomial sampling at opts.temperature (seeded), with the log-likelihood of each under the
        model (the untempered distribution)."""
        self.calls += 1
        gen = torch.Generator().manual_seed(self.opts.seed)
        cache = self._fork(n)
        logp = self.last_logp.expand(n, -1)
        seqs: list[list[int]] = [[] for _ in range(n)]
        lls = [0.0] * n
        done = [False] * n
        for _ in range(self.opts.max_new_tokens):
            probs = torch.softmax(logp / self.opts.temperature, -1) if self.opts.temperature != 1 else logp.exp()
            tok = torch.multinomial(probs, 1, generator=gen)[:, 0]
            for i in range(n):
                if not done[i]:
                    seqs[i].append(int(tok[i]))
                    lls[i] += float(logp[i, tok[i]])
                    done[i] = self.ends(int(tok[i]))
            if all(done):
                break
            logp = self._step(cache, tok[:, None])[:, -1]
        return list(zip(seqs, lls, strict=False))

    @torch.no_grad()
    def distributions(self, ids: Sequence[int]) -> torch.Tensor:
        """The next-token distributions [len(ids), V] along an answer (SDLG's importance scores)."""
        if len(ids) <= 1:
            return self.last_logp.exp()[None]
        rest = self._step(self._fork(1), torch.tensor([list(ids[:-1])]))[0]
        return torch.cat([self.last_logp[None], rest]).exp()


# ------------------------------------------------------------------------------------ a model behind an OpenAI API
# A token the API names by a text spelled like a control token is taken for one (the API gives no ids to check):
# these spellings end an answer, as the end-of-sequence token does; any other "<...>" spelling is never substituted.
EOS_SPELLINGS = frozenset({"</s>", "<eos>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<end_of_turn>",
                           "<|im_end|>", "<|end|>"})
_CONTROL = re.compile(r"<\|?/?[A-Za-z_][A-Za-z0-9_.:-]*\|?>")


class TokenTable:
    """The tokens of a remote model, which the OpenAI completions API names by their text: each distinct text gets
    a small id (in order of first sight), so the SDLG code path that works on token ids runs unchanged. Two token
    ids of the server that decode to the same text are one token here (the API's top_logprobs are keyed by text)."""

    def __init__(self):
        self.strings: list[str] = []
        self.ids: dict[str, int] = {}
        self.special: set[int] = set()
        self.eos: set[int] = set()

    def id(self, text: str) -> int:
        i = self.ids.get(text)
        if i is None:
            i = self.ids[text] = len(self.strings)
            self.strings.append(text)
            if _CONTROL.fullmatch(text):
                self.special.add(i)
                if text in EOS_SPELLINGS:
                    self.eos.add(i)
        return i

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return "".join(self.strings[i] for i in ids if not (skip_special_tokens and i in self.special))

    def __len__(self) -> int:
        return len(self.strings)


class RemoteLM:
    """LM's interface over a model served by an OpenAI-compatible server (services.generation.remote), from what
    the completions API gives: the text of each generated token, its logprob, and the top-L alternatives with their
    logprobs at each step (`logprobs` = L, opts.remote_top_logprobs). `complete(prompt, max_tokens=, temperature=,
    logprobs=, seed=, stop=)` makes one non-streamed request and returns its first choice.

    - beam search: beam_search's loop, each step asking the server for one greedy token after prompt + each live
      beam's text (max_tokens 1, logprobs L >= 2K: every candidate the loop can keep is in the answer, so the search
      is the local one's, token for token); the K requests of a step go concurrently. Answers are cached per beam,
      so the initial answer's next-token distributions come from its own search at no extra cost.
    - multinomial sampling: N concurrent requests (seed, seed + 1, ...) at opts.temperature with their token
      logprobs.
    - SDLG's importance scores: p(v | prefix) from those top-L lists.

    What is approximated, and why:
    - SDLG's candidates are the tokens above token_prob_threshold among the top L at each position, not among the
      whole vocabulary (the API returns no more); their importance p(v) is the server's own logprob, exact. With L =
      20 (the cap of vLLM and of this service's own server) a candidate is missed only where more than 20 tokens pass
      the threshold; the substitution and attribution scores are computed here from the token texts, as locally.
    - A prefix goes to the server as text (prompt + the beam's token texts), which the server tokenises again: it is
      the same token sequence whenever the tokens' texts re-encode to themselves (the usual case; a byte-level token
      that is half of a UTF-8 character cannot).
    - Tokens are known by text (TokenTable): a control token is recognised by its spelling.
    - The log-likelihoods are the server's logprobs: of the model's distribution for this service's own server
      (and vLLM with its default raw logprobs); a server that reports them after temperature scaling makes the
      baselines' likelihoods those of the tempered distribution."""

    def __init__(self, complete, prompt: str, opts: Options, cancelled=None):
        self.complete, self.prompt, self.opts = complete, prompt, opts
        self.cancelled = cancelled or (lambda: False)
        self.tok = TokenTable()
        self.special, self.eos = self.tok.special, self.tok.eos   # shared sets: they grow with the table
        self.calls = 0
        self.requests = 0
        self._next: dict[tuple[int, ...], dict[int, float]] = {}

    def _requests(self, calls: Sequence[tuple[str, dict]]) -> list[dict]:
        """The first choice of each (prompt, parameters) request, made concurrently (a server batches them, as
        vLLM and this service's engine do); answers in the calls' order."""
        if not calls:
            return []
        if self.cancelled():
            raise Cancelled("the caller went away")
        self.requests += len(calls)
        if len(calls) == 1:
            return [self.complete(calls[0][0], **calls[0][1])]
        with ThreadPoolExecutor(max_workers=min(len(calls), 8)) as pool:
            return list(pool.map(lambda c: self.complete(c[0], **c[1]), calls))

    def _tokens(self, choice: dict) -> tuple[list[int], list[float], list[dict[int, float]]]:
        lp = choice.get("logprobs") or {}
        ids = [self.tok.id(t) for t in lp.get("tokens") or []]
        lps = [float(x) if x is not None else -math.inf for x in lp.get("token_logprobs") or [None] * len(ids)]
        tops = [{self.tok.id(t): float(v) for t, v in (d or {}).items()} for d in lp.get("top_logprobs") or []]
        return ids, lps, tops

    def text(self, ids: Sequence[int]) -> str:
        return answer_text(self.tok.decode(list(ids), skip_special_tokens=True), self.opts.stop)

    def ends(self, token_id: int) -> bool:
        return token_id in self.eos or any(st and st in self.tok.strings[token_id] for st in self.opts.stop)

    def next_logp(self, ids: Sequence[int]) -> dict[int, float]:
        """{token: logprob} of the server's top L next tokens after prompt + ids (and the greedy one)."""
        return self.next_logps([ids])[0]

    def next_logps(self, rows: Sequence[Sequence[int]]) -> list[dict[int, float]]:
        """next_logp of each row; the rows not asked before in one concurrent round of requests."""
        todo = [k for k in dict.fromkeys(tuple(r) for r in rows) if k not in self._next]
        params = dict(max_tokens=1, temperature=0.0, logprobs=self.opts.remote_top_logprobs, seed=None, stop=())
        choices = self._requests([(self.prompt + self.tok.decode(list(k)), params) for k in todo])
        for key, choice in zip(todo, choices, strict=True):  # in order: the token table's ids do not depend on timing
            toks, lps, tops = self._tokens(choice)
            nxt = dict(tops[0]) if tops else {}
            if toks:
                nxt.setdefault(toks[0], lps[0])
                if choice.get("finish_reason") == "stop" and not self.ends(toks[0]):
                    self.eos.add(toks[0])   # it ended the answer without a stop string: the end-of-sequence token
            self._next[key] = nxt
        return [self._next[tuple(r)] for r in rows]

    def _dense(self, rows: Sequence[dict[int, float] | None]) -> torch.Tensor:
        out = torch.full((len(rows), len(self.tok)), float("-inf"))
        for r, d in enumerate(rows):
            for t, v in (d or {}).items():
                out[r, t] = v
        return out

    def beam(self, prefix: Sequence[int] = (), prefix_logp: float = 0.0) -> tuple[list[int], float]:
        self.calls += 1
        k = self.opts.num_beams
        if self.opts.remote_top_logprobs < 2 * k:
            raise ValueError("remote_top_logprobs must be >= 2 * num_beams")
        rows: list[list[int]] = [list(prefix)] * k
        first = self._dense([self.next_logp(prefix)]).expand(k, -1)

        def advance(src: list[int], tokens: list[int], live: list[bool]) -> torch.Tensor:
            nonlocal rows
            rows = [[*rows[r], t] for r, t in zip(src, tokens, strict=True)]
            known = iter(self.next_logps([r for r, ok in zip(rows, live, strict=True) if ok]))
            return self._dense([next(known) if ok else None for ok in live])
        return beam_search(self.opts, self.ends, prefix, prefix_logp, first, advance)

    def sample(self, n: int) -> list[tuple[list[int], float]]:
        self.calls += 1
        stop = tuple(st for st in self.opts.stop if st)
        choices = self._requests([(self.prompt, dict(max_tokens=self.opts.max_new_tokens,
                                                     temperature=self.opts.temperature, logprobs=1,
                                                     seed=self.opts.seed + i, stop=stop)) for i in range(n)])
        out = []
        for choice in choices:
            ids, lps, _ = self._tokens(choice)
            out.append((ids, float(sum(lps))))
        return out

    def distributions(self, ids: Sequence[int]) -> torch.Tensor:
        """[len(ids), V]: the server's top-L probabilities at each position of the answer (0 elsewhere)."""
        return self._dense(self.next_logps([ids[:k] for k in range(max(len(ids), 1))])).exp()


class Cancelled(Exception):
    """The caller of a remote estimate went away: no more requests are made."""


# ------------------------------------------------------------------------------------------------------- SDLG
def _spans(words_of: str) -> list[tuple[int, int]]:
    spans, i = [], 0
    for w in words_of.split():
        i = words_of.index(w, i)
        spans.append((i, i + len(w)))
        i += len(w)
    return spans


def lm_word_tokens(lm: LM, ids: Sequence[int]) -> tuple[list[tuple[int, int]], list[int]]:
    """(word spans in the answer text, the index of each word's first LM token) through character offsets of the
    incrementally decoded answer."""
    raw = lm.tok.decode(list(ids), skip_special_tokens=True)
    text = lm.text(ids)
    base = raw.index(text) if text and text in raw else 0
    spans = _spans(text)
    ends = [len(lm.tok.decode(list(ids[:k + 1]), skip_special_tokens=True)) for k in range(len(ids))]
    starts = [0, *ends[:-1]]
    first = []
    for s, e in spans:
        s, e = s + base, e + base
        k = next((k for k in range(len(ids)) if ends[k] > s and starts[k] < e), None)
        first.append(-1 if k is None else k)
    return spans, first


def rank_substitutions(lm: LM, nli, question: str, answer_ids: Sequence[int], probs: torch.Tensor,
                       opts: Options) -> list[dict]:
    """The ranked substitution candidates of the repo's compute_token_score_ranking (see the module docstring):
    dicts {word, pos (LM position), token, attribution, substitution, importance}, best first."""
    answer = lm.text(answer_ids)
    spans, first = lm_word_tokens(lm, answer_ids)
    cands: list[dict] = []
    if len(spans) <= 1:  # one word: the repo ranks the first token's alternatives by importance alone
        pos = 0
        for v in torch.nonzero(probs[pos] > opts.token_prob_threshold).flatten().tolist():
            if v != answer_ids[pos] and v not in (lm.special - lm.eos) and not lm.ends(v):
                cands.append(dict(word=0, pos=pos, token=v, attribution=0.0, substitution=0.0,
                                  importance=float(probs[pos, v])))
        order = rank_triples([(0.0, 0.0, c["importance"]) for c in cands], opts.alphas)
        return [cands[i] for i in order]
    premise = f"{question} {answer}"
    enc, grad, emb = nli.contradiction_gradient(premise, premise)
    off0 = len(question) + 1
    seq = enc["sequence_ids"]
    offsets = enc["offsets"].tolist()
    attr = (grad * emb).abs()
    word_nli: list[list[int]] = []
    for s, e in spans:
        word_nli.append([t for t, (a, b) in enumerate(offsets)
                         if seq[t] == 0 and b > a and b > off0 + s and a < off0 + e])
    attributions = [float(attr[idx].mean(0).norm()) if idx else 0.0 for idx in word_nli]
    emb_cache: dict[int, torch.Tensor] = {}

    def e_of(v: int) -> torch.Tensor:
        if v not in emb_cache:
            emb_cache[v] = nli.text_embedding(lm.tok.decode([v]).strip())
        return emb_cache[v]

    for w, (pos, idx) in enumerate(zip(first, word_nli, strict=False)):
        if pos < 0 or not idx:
            continue
        orig = int(answer_ids[pos])
        vs = [v for v in torch.nonzero(probs[pos] > opts.token_prob_threshold).flatten().tolist()
              if v != orig and v not in (lm.special - lm.eos)]
        if not vs:
            continue
        g = grad[idx[0]]
        delta = torch.stack([e_of(orig) - e_of(v) for v in vs])
        sub = torch.nn.functional.cosine_similarity(delta, g[None], dim=-1).nan_to_num(0.0)
        for v, s in zip(vs, sub.tolist(), strict=False):
            cands.append(dict(word=w, pos=pos, token=v, attribution=attributions[w], substitution=float(s),
                              importance=float(probs[pos, v])))
    order = rank_triples([(c["attribution"], c["substitution"], c["importance"]) for c in cands], opts.alphas)
    return [cands[i] for i in order]


def sdlg_alternatives(lm: LM, nli, question: str, initial: Generation, probs: torch.Tensor,
                      opts: Options) -> list[Generation]:
    """Algorithm 1: walk the ranking, prefix + v continued by beam search, until opts.n non-empty alternatives."""
    out: list[Generation] = []
    ranked = rank_substitutions(lm, nli, question, initial.ids, probs, opts)
    logp_initial = [math.log(max(float(probs[k, t]), 1e-30)) for k, t in enumerate(initial.ids)]
    for c in ranked[:opts.max_candidates]:
        prefix = [*initial.ids[:c["pos"]], c["token"]]
        prefix_logp = sum(logp_initial[:c["pos"]]) + math.log(max(c["importance"], 1e-30))
        if lm.ends(c["token"]):
            if c["word"] == 0:
                continue  # the repo skips ending the answer before its first word
            ids, ll = prefix, prefix_logp
        else:
            ids, ll = lm.beam(prefix, prefix_logp)
        text = lm.text(ids)
        if not text:
            continue
        out.append(Generation(text, ids, ll, len(ids), origin="substitution", word_index=c["word"],
                              token_text=lm.tok.decode([c["token"]]), token_probability=c["importance"]))
        if len(out) >= opts.n:
            break
    return out


# ---------------------------------------------------------------------------------------------------- estimate
def initial_answer(lm: LM) -> tuple[Generation, torch.Tensor | None]:
    """The initial answer by beam search and its next-token distributions (shared by every method)."""
    ids, ll = lm.beam()
    return Generation(lm.text(ids), ids, ll, len(ids)), (lm.distributions(ids) if ids else None)


def answer_tokens(lm, answer: Generation, probs: torch.Tensor | None, top: int = 0) -> list[tuple]:
    """(token id, text released with it, logprob, [(id, text, logprob) of the `top` most likely tokens]) for each
    token of the initial answer: the texts concatenate to answer.text (stop string cut, whitespace stripped; a token
    whose text is not yet settled, such as half a UTF-8 character, releases nothing and a later one releases it)."""
    out, emitted = [], ""
    for k, t in enumerate(answer.ids):
        cur = lm.text(answer.ids[:k + 1])
        delta = ""
        if cur.startswith(emitted) and not cur.endswith("\ufffd") and answer.text.startswith(cur):
            delta, emitted = cur[len(emitted):], cur
        lp = math.log(max(float(probs[k, t]), 1e-30)) if probs is not None else math.nan
        alternatives = []
        if top and probs is not None:
            vals, idx = torch.topk(probs[k], min(top, probs.shape[1]))
            alternatives = [(int(i), lm.tok.decode([int(i)]), math.log(float(v)))
                            for v, i in zip(vals, idx, strict=True) if v > 0]  # 0: beyond a remote model's top L
        out.append((int(t), delta, lp, alternatives))
    if out and emitted != answer.text:  # whatever is left goes with the last token
        t, delta, lp, alternatives = out[-1]
        out[-1] = (t, delta + answer.text[len(emitted):], lp, alternatives)
    return out


def estimate(model, tokenizer, nli, prompt: str, question: str, opts: Options, *, lm: LM | None = None,
             initial: tuple[Generation, torch.Tensor | None] | None = None,
             prompt_ids: Sequence[int] | None = None, on_answer=None) -> Estimate:
    """One answer with its semantic uncertainty by opts.method (module docstring). `nli` may be None for
    "predictive" and "lexical" (no clusters then). `lm` and `initial` may be passed to share the prompt's cache and
    the initial answer between methods (the benchmark does; its costs are then counted once); `lm` may be a
    RemoteLM (model and tokenizer None then). on_answer(answer_tokens(...)) is called once the initial answer is
    known, before the alternatives and the clustering (GenerateStream sends the answer then)."""
    if opts.method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}")
    if nli is None and opts.method in ("sdlg", "multinomial"):
        raise ValueError(f"{opts.method} needs an NLI model")
    t0 = time.perf_counter()
    if lm is None:
        lm = LM(model, tokenizer, opts, tokenizer(prompt)["input_ids"] if prompt_ids is None else prompt_ids)
    lm.opts = opts
    calls0 = lm.calls
    if initial is None:
        initial = initial_answer(lm)
    first, probs = initial
    if on_answer is not None:
        on_answer(answer_tokens(lm, first, probs, opts.top_logprobs))
    gens = [copy.copy(first)]
    if opts.method == "sdlg":
        if probs is not None and first.text:
            gens += sdlg_alternatives(lm, nli, question, first, probs, opts)
    else:
        gens += [Generation(lm.text(ids), ids, ll, len(ids), origin="sample") for ids, ll in lm.sample(opts.n)]
    weights = sdlg_weights([g.token_probability for g in gens[1:]]) if opts.method == "sdlg" else [1.0] * len(gens)
    for g, w in zip(gens, weights, strict=False):
        g.weight = w
    t1 = time.perf_counter()
    texts = [g.text for g in gens]
    lps = [g.lp(opts.length_normalised) for g in gens]
    if nli is not None:
        ids = cluster(texts, nli_equivalence(nli, question, texts))
        se, agg = semantic_entropy(lps, weights, ids)
    else:
        ids, se, agg = list(range(len(gens))), None, []
    order: list[int] = []
    for c in ids:
        if c not in order:
            order.append(c)
    members = [[i for i, c in enumerate(ids) if c == k] for k in order]
    pe = predictive_entropy(lps)
    lex = lexical_similarity(texts)
    score = {"sdlg": se, "multinomial": se, "predictive": pe, "lexical": 1.0 - lex}[opts.method]
    return Estimate(opts.method, first.text, gens, ids, members, agg, float(score), se, pe, lex,
                    seconds_generate=t1 - t0, seconds_cluster=time.perf_counter() - t1, lm_calls=lm.calls - calls0)
