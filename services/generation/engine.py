"""The generation engine: iteration-level continuous batching over a Hugging Face causal LM (Orca-style scheduling).

One engine thread owns the model. Each iteration it (1) admits waiting requests up to `max_running`: each is
prefilled alone with the model's own forward (transformers, batch 1), its first token sampled, and its prompt cache
optionally compressed (services.generation.kvpolicy); (2) runs ONE decode step for every running sequence together:
the model's layers are applied to the batch of last tokens, each sequence attending over its own cache through
kernels.decode_attention (variable length per sequence, layer and KV head: compressed caches are ragged); (3) retires
finished and cancelled sequences, whose cache is dropped at once. A request never waits for another to finish.

Simplifications (said here, not hidden): prefill is not chunked (a long prompt delays the next decode step by its
prefill); the decode step is written per family (Llama: RMSNorm/RoPE/GQA/SwiGLU; GPT-2: LayerNorm/learned
positions/fused QKV; Gemma 3: QK-norm, sandwich norms, a local and a global RoPE, sliding-window layers) over the
model's own modules, so its logits equal transformers' to float32 rounding, not bit for bit; cache memory is one
buffer per sequence and layer (no paging).

Sliding-window layers (Gemma 3): a query at position p attends to the keys at positions (p - W, p], as transformers'
mask does. Such a layer's buffer holds at most W tokens: after prefill the prompt's last W - 1 (what transformers'
cache keeps), and each decode step writes the new token over the one that just left the window (attention does not
depend on the order of the cached keys, whose positions are already applied by RoPE), so its cache never grows past
W. Every cached token's position is kept, so this holds for compressed (ragged) caches too.

Sampling follows transformers' order: temperature, then top-k, then top-p, then a multinomial draw with the
request's own torch.Generator (seeded: the same seed gives the same tokens, whatever else is in the batch, up to
float rounding); temperature 0 is greedy. Logprobs are those of the model's unmodified distribution
(log_softmax of the logits). Stop strings end generation at their first occurrence (the stop text is not returned);
streamed text is held back while it could still be the start of a stop string or an incomplete UTF-8 character."""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from kernels.decode_attention import decode_attention
from services.common.errors import Cancelled, FailedPrecondition, InvalidArgument, ResourceExhausted, Unavailable
from services.generation.kvpolicy import CachePolicy, compress

NO_COMPRESSION = CachePolicy()  # the default policy: keep the whole cache

log = logging.getLogger(__name__)


class QueueFull(ResourceExhausted):
    """The engine's queue is full: RESOURCE_EXHAUSTED with a retry delay."""

    reason = "QUEUE_FULL"


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 0.0        # 0: greedy
    top_k: int = 0                  # 0: off
    top_p: float = 1.0              # 1: off
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: int = 0               # top-n logprobs per token (0: none; the chosen token's is always given)
    ignore_eos: bool = False


@dataclass
class TokenEvent:
    token_id: int
    text: str                        # text delta released with this token (may be empty)
    logprob: float
    top_logprobs: list[tuple[int, str, float]]


@dataclass
class Finished:
    finish_reason: str               # "stop" | "length" | "cancelled" | "error"
    text: str
    token_ids: list[int]
    prompt_tokens: int
    completion_tokens: int
    cache_bytes: int                 # KV bytes the sequence held when it left (prompt kept + generated)
    full_cache_bytes: int            # what the full uncompressed cache would have held
    kept_fraction: float             # prompt tokens kept / prompt tokens (over layers and heads)
    time_to_first_token_s: float
    freed: bool = True               # the engine dropped the sequence's cache
    error: BaseException | None = None
    budgets: list[int] = field(default_factory=list)


class Request:
    """A submitted generation; events arrive through `on_event` (called from the engine thread) in order:
    TokenEvent..., then one Finished."""

    _ids = 0

    def __init__(self, prompt_ids: list[int], sampling: SamplingParams, policy: CachePolicy,
                 on_event: Callable[[Any], None]):
        Request._ids += 1
        self.id = Request._ids
        self.prompt_ids, self.sampling, self.policy, self.on_event = list(prompt_ids), sampling, policy, on_event
        self.cancelled = threading.Event()
        self.submitted = time.monotonic()

    def cancel(self) -> None:
        self.cancelled.set()


# ------------------------------------------------------------------------------------------------ model adapters
class _Adapter:
    """The decode step of one model family over per-sequence caches."""

    def __init__(self, model):
        self.model = model
        cfg = model.config
        self.L = cfg.num_hidden_layers
        self.H = cfg.num_attention_heads
        self.windows: list[int | None] = [None] * self.L  # a sliding layer's window W (None: global attention)

    def held(self, m: int) -> torch.Tensor:
        """[L] tokens of an m-token prompt each layer holds after prefill (a sliding layer: its last W - 1)."""
        return torch.tensor([m if w is None else min(m, w - 1) for w in self.windows], dtype=torch.int64)

    def scale_of(self, layer: int) -> float:
        return self.scale


class LlamaAdapter(_Adapter):
    def __init__(self, model):
        super().__init__(model)
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        self.rope = apply_rotary_pos_emb
        a = model.model.layers[0].self_attn
        self.D = a.head_dim
        self.Hkv = model.config.num_key_value_heads
        self.scale = a.scaling

    def embed(self, ids: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, Any]:
        h = self.model.model.embed_tokens(ids)[:, None, :]
        return h, self.model.model.rotary_emb(h, position_ids=pos[:, None])

    def qkv(self, layer: int, h: torch.Tensor, extra) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        blk = self.model.model.layers[layer]
        a = blk.self_attn
        x = blk.input_layernorm(h)
        B, T = x.shape[:2]
        q = a.q_proj(x).view(B, T, -1, self.D).transpose(1, 2)
        k = a.k_proj(x).view(B, T, -1, self.D).transpose(1, 2)
        v = a.v_proj(x).view(B, T, -1, self.D).transpose(1, 2)
        cos, sin = extra
        q, k = self.rope(q, k, cos, sin)
        return q, k, v

    def queries(self, layer: int, hidden: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Queries [H, T, D] of prompt rows (hidden = the layer's input [1, T, E], pos [T])."""
        blk = self.model.model.layers[layer]
        x = blk.input_layernorm(hidden)
        q = blk.self_attn.q_proj(x).view(1, x.shape[1], -1, self.D).transpose(1, 2)
        cos, sin = self.model.model.rotary_emb(hidden, position_ids=pos[None])
        q, _ = self.rope(q, q, cos, sin)
        return q[0]

    def finish_layer(self, layer: int, h: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        blk = self.model.model.layers[layer]
        h = h + blk.self_attn.o_proj(attn)
        return h + blk.mlp(blk.post_attention_layernorm(h))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self.model.model.norm(h))[:, -1].float()


class GPT2Adapter(_Adapter):
    def __init__(self, model):
        super().__init__(model)
        a = model.transformer.h[0].attn
        self.D = a.head_dim
        self.Hkv = self.H
        self.scales = [blk.attn.scaling for blk in model.transformer.h]
        self.scale = self.scales[0]

    def embed(self, ids, pos):
        t = self.model.transformer
        return (t.wte(ids) + t.wpe(pos))[:, None, :], None

    def _split(self, x, layer):
        a = self.model.transformer.h[layer].attn
        q, k, v = a.c_attn(x).split(a.split_size, dim=2)
        B, T = x.shape[:2]
        return [t.view(B, T, self.H, self.D).transpose(1, 2) for t in (q, k, v)]

    def qkv(self, layer, h, extra):
        return self._split(self.model.transformer.h[layer].ln_1(h), layer)

    def queries(self, layer, hidden, pos):
        return self._split(self.model.transformer.h[layer].ln_1(hidden), layer)[0][0]

    def finish_layer(self, layer, h, attn):
        blk = self.model.transformer.h[layer]
        h = h + blk.attn.c_proj(attn)
        return h + blk.mlp(blk.ln_2(h))

    def logits(self, h):
        return self.model.lm_head(self.model.transformer.ln_f(h))[:, -1].float()

    def scale_of(self, layer: int) -> float:
        return self.scales[layer]


class Gemma3Adapter(_Adapter):
    """Gemma 3 (text): embeddings scaled by sqrt(hidden) inside embed_tokens, QK-norm before RoPE, a RoPE per layer
    type (local base for sliding layers, global for full-attention ones), norms before and after attention and MLP,
    scale query_pre_attn_scalar ** -0.5, and sliding-window layers."""

    def __init__(self, model):
        super().__init__(model)
        from transformers.models.gemma3.modeling_gemma3 import apply_rotary_pos_emb

        cfg = model.config
        if getattr(cfg, "attn_logit_softcapping", None) is not None:
            raise FailedPrecondition("Gemma models with attention logit soft-capping have no decode step in the local "
                                     "engine", reason="UNSUPPORTED_MODEL_FAMILY")
        self.rope = apply_rotary_pos_emb
        a = model.model.layers[0].self_attn
        self.D = a.head_dim
        self.Hkv = cfg.num_key_value_heads
        self.scale = a.scaling
        self.types = list(cfg.layer_types)
        self.windows = [cfg.sliding_window if t == "sliding_attention" else None for t in self.types]
        self.softcap = getattr(cfg, "final_logit_softcapping", None)

    def _rope(self, h: torch.Tensor, pos: torch.Tensor) -> dict:
        rot = self.model.model.rotary_emb
        return {t: rot(h, pos, t) for t in set(self.types)}

    def embed(self, ids: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, Any]:
        h = self.model.model.embed_tokens(ids)[:, None, :]
        return h, self._rope(h, pos[:, None])

    def _q(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        a = self.model.model.layers[layer].self_attn
        B, T = x.shape[:2]
        return a.q_norm(a.q_proj(x).view(B, T, -1, self.D).transpose(1, 2))

    def qkv(self, layer: int, h: torch.Tensor, extra) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        blk = self.model.model.layers[layer]
        a = blk.self_attn
        x = blk.input_layernorm(h)
        B, T = x.shape[:2]
        q = self._q(layer, x)
        k = a.k_norm(a.k_proj(x).view(B, T, -1, self.D).transpose(1, 2))
        v = a.v_proj(x).view(B, T, -1, self.D).transpose(1, 2)
        cos, sin = extra[self.types[layer]]
        q, k = self.rope(q, k, cos, sin)
        return q, k, v

    def queries(self, layer: int, hidden: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        blk = self.model.model.layers[layer]
        q = self._q(layer, blk.input_layernorm(hidden))
        cos, sin = self.model.model.rotary_emb(hidden, pos[None], self.types[layer])
        q, _ = self.rope(q, q, cos, sin)
        return q[0]

    def finish_layer(self, layer: int, h: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        blk = self.model.model.layers[layer]
        h = h + blk.post_attention_layernorm(blk.self_attn.o_proj(attn))
        return h + blk.post_feedforward_layernorm(blk.mlp(blk.pre_feedforward_layernorm(h)))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        x = self.model.lm_head(self.model.model.norm(h))[:, -1].float()
        if self.softcap is not None:
            x = torch.tanh(x / self.softcap) * self.softcap
        return x


def adapter_for(model) -> _Adapter:
    kind = getattr(model.config, "model_type", "")
    if kind == "llama":
        return LlamaAdapter(model)
    if kind == "gpt2":
        return GPT2Adapter(model)
    if kind == "gemma3_text":
        return Gemma3Adapter(model)
    raise FailedPrecondition(f"model family {kind!r} has no decode step in the local engine",
                             reason="UNSUPPORTED_MODEL_FAMILY")


def _layer_kv(cache, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    c = getattr(cache, "self_attention_cache", cache)
    lay = c.layers[layer]
    return lay.keys, lay.values


# ------------------------------------------------------------------------------------------------ sequences
class Sequence:
    """A running request: its cache (per layer a buffer [Hkv, cap, D], the cached tokens' positions [Hkv, cap] and
    lengths [Hkv]) and its output."""

    def __init__(self, req: Request, k: list[torch.Tensor], v: list[torch.Tensor], positions: list[torch.Tensor],
                 lengths: torch.Tensor, full_tokens: int, kept_fraction: float, budgets: list[int],
                 generator: torch.Generator | None):
        self.req = req
        self.k, self.v, self.lengths = k, v, lengths  # lengths [L, Hkv] int64
        self.positions = positions
        self.pos = len(req.prompt_ids)                   # position of the next token fed
        self.generated: list[int] = []
        self.emitted = 0                                 # chars of text released
        self.full_tokens = full_tokens
        self.kept_fraction = kept_fraction
        self.budgets = budgets
        self.generator = generator
        self.first_token_at: float | None = None
        self.finish: str | None = None
        self.final_text: str | None = None
        self.slot = -1                                   # its row of the engine's batch cache while it runs

    def cache_bytes(self) -> int:
        k, v = self.k, self.v
        if not k or not v:
            return 0  # left: the cache is gone
        per = k[0].element_size() * (k[0].shape[-1] + v[0].shape[-1])
        return int(self.lengths.sum()) * per

    def buffer_bytes(self) -> int:
        k, v = self.k, self.v
        return sum(t.numel() * t.element_size() for t in (*k, *v))


class Engine:
    """Continuous batching over one loaded model. submit() is thread-safe; events are delivered from the engine's
    thread through each request's on_event."""

    def __init__(self, model, tokenizer, *, max_running: int = 32, max_queued: int = 64,
                 max_context: int | None = None, retry_after_s: float = 0.5, backend: str = "auto",
                 name: str = "model"):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.adapter = adapter_for(model)
        self.max_running, self.max_queued, self.retry_after_s = max_running, max_queued, retry_after_s
        cfg_ctx = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", 2048)
        self.max_context = int(min(max_context or cfg_ctx, cfg_ctx))
        # end-of-sequence ids: the tokenizer's and the generation config's (Gemma ends a chat turn with <end_of_turn>)
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        gen_eos = list(gen_eos) if isinstance(gen_eos, (list, tuple)) else [gen_eos]
        self.eos_ids = {int(i) for i in [tokenizer.eos_token_id, *gen_eos] if i is not None}
        bos = tokenizer.bos_token_id
        # does the tokenizer's own encoding put BOS first? (its post-processor says so; a GGUF's add_bos_token)
        self.bos_first = bos is not None and tokenizer("a")["input_ids"][:1] == [bos] != \
            tokenizer("a", add_special_tokens=False)["input_ids"][:1]
        self.backend = backend
        self.name = name
        self.waiting: deque[Request] = deque()
        self.running: list[Sequence] = []  # running[i] holds row i of the batch cache (Sequence.slot == i)
        # The batch cache: per layer keys/values [rows, Hkv, C_l, D] and positions [rows, Hkv, C_l] (-1: empty), and
        # the lengths [rows, L, Hkv]. A running sequence's cache is its row (its k/v/positions/lengths are views of
        # it), so a decode step appends every sequence's token with one indexed write per layer and attends over the
        # rows [:B] in place, instead of copying every cache into a padded batch each step. Grown when a request
        # needs more rows or a longer buffer than any running one (amortised doubling); dropped when nothing runs.
        self._K: list[torch.Tensor] = []
        self._V: list[torch.Tensor] = []
        self._P: list[torch.Tensor] = []
        self._N: torch.Tensor | None = None
        self._lock = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.idle_exit_s = 30.0
        self._flushers: list[Callable[[], None]] = []  # called after each phase of an iteration (add_flusher)
        # The text of a sequence's tokens is decoded whole at every token (so it is exactly the tokenizer's text of
        # them). decode() of a flat list of ints is to_py_obj (a Python scan of the whole list, more than half the
        # cost at 128 tokens) followed by _decode: call _decode where the tokenizer has it.
        inner = getattr(tokenizer, "_decode", None)
        self._decode: Callable[[list[int]], str] = (
            (lambda ids: inner(ids, skip_special_tokens=True)) if callable(inner) else
            (lambda ids: tokenizer.decode(ids, skip_special_tokens=True)))
        # metrics
        self.steps = 0
        self.tokens_out = 0
        self.freed_sequences = 0
        self.ttft: deque[float] = deque(maxlen=1000)
        self.batch_sizes: deque[int] = deque(maxlen=1000)

    # -- public
    def start(self) -> "Engine":
        with self._lock:
            if self._thread is None:
                self._stop = False
                self._thread = threading.Thread(target=self._loop, name=f"engine-{self.name}", daemon=True)
                self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(30)
        with self._lock:
            self._thread = None

    def add_flusher(self, fn: Callable[[], None]) -> None:
        """Call fn() from the engine thread after each batch of events (the admissions of an iteration, its decode
        step, a shutdown): a listener that buffers events (services.generation.api's mailbox to an event loop) hands
        them over once per batch instead of once per token."""
        with self._lock:
            if fn not in self._flushers:
                self._flushers.append(fn)

    def _flush(self) -> None:
        for fn in list(self._flushers):
            try:
                fn()
            except Exception:
                log.exception("engine %s: event flush failed", self.name)

    def encode(self, text: str) -> list[int]:
        """Token ids of a prompt, with the BOS token first when the tokenizer is configured to add it (Gemma and
        Llama checkpoints are trained that way and go wrong without it); no other special token is added."""
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if self.bos_first and ids[:1] != [self.tokenizer.bos_token_id]:
            ids.insert(0, self.tokenizer.bos_token_id)
        return ids

    def check(self, prompt_ids: list[int], sampling: SamplingParams, field: str = "prompt") -> None:
        if not prompt_ids:
            raise InvalidArgument(field, "the prompt is empty (no tokens)")
        if len(prompt_ids) + sampling.max_new_tokens > self.max_context:
            if len(prompt_ids) >= self.max_context:
                raise InvalidArgument(field, f"the prompt has {len(prompt_ids)} tokens; the model's context is "
                                      f"{self.max_context}")
            raise InvalidArgument("max_new_tokens", f"prompt ({len(prompt_ids)} tokens) + max_new_tokens "
                                  f"({sampling.max_new_tokens}) exceeds the model's context of {self.max_context}")

    def submit(self, req: Request) -> Request:
        self.check(req.prompt_ids, req.sampling)
        with self._lock:
            if self._stop:
                raise Unavailable("the engine is stopping", retry_after_s=self.retry_after_s)
            if len(self.waiting) >= self.max_queued:
                raise QueueFull(f"{len(self.waiting)} requests are queued for {self.name!r}; retry shortly",
                                retry_after_s=self.retry_after_s)
            self.waiting.append(req)
            self._lock.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=f"engine-{self.name}", daemon=True)
                self._thread.start()
        return req

    def stats(self) -> dict[str, float]:
        with self._lock:
            running = list(self.running)
            waiting = len(self.waiting)
        return {"running": len(running), "queued": waiting,
                "cache_bytes": float(sum(s.cache_bytes() for s in running)),
                "cache_buffer_bytes": float(sum(s.buffer_bytes() for s in running)),
                "steps": self.steps, "tokens_out": self.tokens_out, "freed_sequences": self.freed_sequences,
                "mean_ttft_s": (sum(self.ttft) / len(self.ttft)) if self.ttft else 0.0,
                "mean_batch": (sum(self.batch_sizes) / len(self.batch_sizes)) if self.batch_sizes else 0.0}

    def generate(self, prompt_ids: list[int], sampling: SamplingParams = SamplingParams(),
                 policy: CachePolicy = NO_COMPRESSION, timeout: float = 300) -> tuple[list[TokenEvent], Finished]:
        """Blocking convenience (tests, benchmarks): submit and collect."""
        return self.generate_many([prompt_ids], sampling, policy, timeout)[0]

    def generate_many(self, prompts: list[list[int]], sampling: SamplingParams = SamplingParams(),
                      policy: CachePolicy = NO_COMPRESSION, timeout: float = 300
                      ) -> list[tuple[list[TokenEvent], Finished]]:
        """Blocking: submit every prompt at once (continuous batching decodes them together), then collect each
        one's (token events, Finished) in order."""
        qs: list[queue.Queue] = [queue.Queue() for _ in prompts]
        for ids, q in zip(prompts, qs, strict=True):
            self.submit(Request(ids, sampling, policy, q.put))
        out = []
        for q in qs:
            events = []
            while True:
                e = q.get(timeout=timeout)
                if isinstance(e, Finished):
                    if e.error is not None:
                        raise e.error
                    out.append((events, e))
                    break
                events.append(e)
        return out

    # -- the loop
    def _loop(self) -> None:
        while True:
            with self._lock:
                idle_since = time.monotonic()
                while not self._stop and not self.waiting and not self.running:
                    if time.monotonic() - idle_since > self.idle_exit_s:
                        self._thread = None  # restarted by the next submit (an evicted engine's thread ends)
                        return
                    self._lock.wait(1.0)
                if self._stop:
                    pending, self.waiting = list(self.waiting), deque()
                    running, self.running = self.running, []
                    break
                admit = []
                while self.waiting and len(self.running) + len(admit) < self.max_running:
                    admit.append(self.waiting.popleft())
            try:
                with torch.inference_mode():
                    for req in admit:
                        self._admit(req)
                        self._flush()  # its first token goes out now, not after the other prefills
                    self._retire()
                    if self.running:
                        self._decode_step()
                        self._retire()
                    self._flush()  # the step's tokens, and whatever left (a cancelled request's Finished)
            except Exception as exc:
                log.exception("engine %s: step failed", self.name)
                for s in list(self.running):
                    s.finish = "error"
                    self._leave(s, exc)
                with self._lock:
                    self.running = []
                self._release()
                self._flush()
        for req in pending:
            req.on_event(self._finished_empty(req, "cancelled", Unavailable("server shutting down")))
        for s in running:
            s.finish = "cancelled"
            self._leave(s, Unavailable("server shutting down"))
        self._release()
        self._flush()

    def _finished_empty(self, req: Request, reason: str, error: BaseException | None = None) -> Finished:
        return Finished(reason, "", [], len(req.prompt_ids), 0, 0, 0, 0.0, 0.0, True, error)

    def _admit(self, req: Request) -> None:
        if req.cancelled.is_set():
            req.on_event(self._finished_empty(req, "cancelled"))
            return
        try:
            seq, logits = self._prefill(req)
        except Exception as exc:
            log.exception("engine %s: prefill failed", self.name)
            req.on_event(self._finished_empty(req, "error", exc))
            return
        self._install(seq)
        with self._lock:
            self.running.append(seq)
        self._emit(seq, logits[0])

    def _prefill(self, req: Request) -> tuple[Sequence, torch.Tensor]:
        a, pol = self.adapter, req.policy
        ids = torch.tensor([req.prompt_ids], dtype=torch.long)
        m = ids.shape[1]
        # logits of the last position only: the vocabulary projection of every prompt row would cost more than the
        # layers for a large vocabulary (Gemma: 262k x 640)
        out = self.model(input_ids=ids, use_cache=True, output_hidden_states=pol.compresses, logits_to_keep=1)
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        layer_k = [_layer_kv(cache, l_)[0][0] for l_ in range(a.L)]    # [Hkv, held_l, D]: a sliding layer's last W-1
        layer_v = [_layer_kv(cache, l_)[1][0] for l_ in range(a.L)]
        held = torch.tensor([t.shape[1] for t in layer_k], dtype=torch.int64)
        hkv = layer_k[0].shape[0]
        budgets: list[int] = []
        if pol.compresses:
            keys = layer_k[0].new_zeros((a.L, hkv, m, layer_k[0].shape[-1]))
            values = layer_v[0].new_zeros((a.L, hkv, m, layer_v[0].shape[-1]))
            for l_ in range(a.L):
                keys[l_, :, m - int(held[l_]):] = layer_k[l_]
                values[l_, :, m - int(held[l_]):] = layer_v[l_]
            tau = min(pol.observation_window, m)
            pos = torch.arange(m)
            hs = out.hidden_states  # hs[l] is layer l's input
            q_tail = q_all = None
            if pol.policy == "vl_cache":
                q_tail = torch.stack([a.queries(l_, hs[l_][:, m - tau:], pos[m - tau:]) for l_ in range(a.L)])
            elif pol.policy == "h2o":
                q_all = torch.stack([a.queries(l_, hs[l_], pos) for l_ in range(a.L)])
            c = compress(pol, keys, values, q_tail.to(keys.dtype) if q_tail is not None else None,
                         q_all.to(keys.dtype) if q_all is not None else None, a.scale, held=held)
            lengths = c.lengths
            layer_k, layer_v, layer_pos = list(c.k), list(c.v), list(c.positions)
            budgets = [int(b) for b in c.budgets]
        else:
            lengths = held[:, None].expand(a.L, hkv).clone()
            layer_pos = [torch.arange(m - int(n), m).expand(hkv, int(n)) for n in held]
        kbuf, vbuf, pbuf = [], [], []
        for l_ in range(a.L):
            n = int(lengths[l_].max())
            cap = n + req.sampling.max_new_tokens + 1
            if a.windows[l_] is not None:
                cap = max(min(cap, a.windows[l_]), n + 1)
            kt, vt = layer_k[l_][:, :n], layer_v[l_][:, :n]
            kb = kt.new_zeros((hkv, cap, kt.shape[-1]))
            vb = vt.new_zeros((hkv, cap, vt.shape[-1]))
            pb = torch.full((hkv, cap), -1, dtype=torch.int64)
            kb[:, :n], vb[:, :n], pb[:, :n] = kt, vt, layer_pos[l_][:, :n]
            kbuf.append(kb)
            vbuf.append(vb)
            pbuf.append(pb)
        gen = None
        if req.sampling.temperature > 0:
            gen = torch.Generator()
            gen.manual_seed(req.sampling.seed if req.sampling.seed is not None else
                            int.from_bytes(os.urandom(6), "little"))
        kept = float(lengths.sum()) / float(hkv * held.sum())
        seq = Sequence(req, kbuf, vbuf, pbuf, lengths, m, kept, budgets, gen)
        return seq, out.logits[:, -1].float()

    # -- the batch cache
    def _bind(self, s: Sequence) -> None:
        """Point a sequence's cache at its row (after it moved or the batch cache was reallocated)."""
        r = s.slot
        s.k = [t[r] for t in self._K]
        s.v = [t[r] for t in self._V]
        s.positions = [t[r] for t in self._P]
        s.lengths = self._N[r]

    def _install(self, s: Sequence) -> None:
        """Copy a prefilled sequence's cache into the next free row (that of index len(running)), growing the batch
        cache when it lacks a row or a layer's buffer is shorter than the sequence's."""
        a, B = self.adapter, len(self.running)
        caps = [t.shape[1] for t in s.k]
        grow = not self._K or B >= self._N.shape[0] or any(c > t.shape[2] for c, t in zip(caps, self._K, strict=True))
        if grow:
            old = (self._K, self._V, self._P, self._N)
            rows = max(B + 1, min(2 * (old[3].shape[0] if old[3] is not None else 0), self.max_running))
            K, V, P = [], [], []
            for l_ in range(a.L):
                have = old[0][l_].shape[2] if old[0] else 0
                limit = a.windows[l_] if a.windows[l_] is not None else self.max_context + 1
                c = caps[l_] if caps[l_] > have else have
                if caps[l_] > have:
                    c = max(caps[l_], min(2 * have, limit))
                k0, v0 = s.k[l_], s.v[l_]
                K.append(k0.new_zeros((rows, k0.shape[0], c, k0.shape[-1])))
                V.append(v0.new_zeros((rows, v0.shape[0], c, v0.shape[-1])))
                P.append(torch.full((rows, k0.shape[0], c), -1, dtype=torch.int64))
                if B:
                    K[l_][:B, :, :have] = old[0][l_][:B]
                    V[l_][:B, :, :have] = old[1][l_][:B]
                    P[l_][:B, :, :have] = old[2][l_][:B]
            N = torch.zeros((rows, a.L, s.lengths.shape[-1]), dtype=torch.int64)
            if B:
                N[:B] = old[3][:B]
            self._K, self._V, self._P, self._N = K, V, P, N
            for r in self.running:
                self._bind(r)
        s.slot = B
        for l_ in range(a.L):
            c = caps[l_]
            self._K[l_][B, :, :c] = s.k[l_]
            self._V[l_][B, :, :c] = s.v[l_]
            self._P[l_][B, :, :c] = s.positions[l_]
            self._P[l_][B, :, c:] = -1
        self._N[B] = s.lengths
        self._bind(s)

    def _compact(self, keep: list[Sequence]) -> None:
        """Move the kept sequences to rows 0..len(keep)-1, in order (a row only moves down, onto a row that left
        or already moved)."""
        for i, s in enumerate(keep):
            if s.slot == i:
                continue
            j = s.slot
            for l_ in range(self.adapter.L):
                n = int(self._N[j, l_].max())
                self._K[l_][i, :, :n] = self._K[l_][j, :, :n]
                self._V[l_][i, :, :n] = self._V[l_][j, :, :n]
                self._P[l_][i] = self._P[l_][j]
            self._N[i] = self._N[j]
            s.slot = i
            self._bind(s)

    def _release(self) -> None:
        self._K, self._V, self._P, self._N = [], [], [], None

    def _decode_step(self) -> None:
        """One token for every running sequence. Per layer: the new keys and values of all sequences are written
        with one indexed write each: appended, or in a sliding layer over the token that has just left the window
        (at most one leaves per step and head); then attention over the batch cache's rows [:B] up to the longest
        length (positions past a head's length are ignored whatever they hold)."""
        a = self.adapter
        seqs = self.running
        B = len(seqs)
        ids = torch.tensor([s.generated[-1] for s in seqs], dtype=torch.long)
        pos = torch.tensor([s.pos for s in seqs], dtype=torch.long)
        h, extra = a.embed(ids, pos)
        N = self._N[:B]
        hkv = N.shape[-1]
        rows, heads = torch.arange(B)[:, None], torch.arange(hkv)[None, :]
        at_pos = pos[:, None].expand(B, hkv)
        big = torch.iinfo(torch.int64).max
        for l_ in range(a.L):
            q, k, v = a.qkv(l_, h, extra)  # [B, H|Hkv, 1, D]
            ln = N[:, l_]
            slot, grown = ln, ln + 1
            window = a.windows[l_]
            if window is not None:
                pb = self._P[l_][:B]
                live = torch.arange(pb.shape[2])[None, None, :] < ln[:, :, None]
                oldest, at = pb.masked_fill(~live, big).min(dim=2)
                left = live.any(dim=2) & (oldest <= at_pos - window)
                slot, grown = torch.where(left, at, ln), torch.where(left, ln, ln + 1)
            self._K[l_][rows, heads, slot] = k[:, :, 0]
            self._V[l_][rows, heads, slot] = v[:, :, 0]
            self._P[l_][rows, heads, slot] = at_pos
            N[:, l_] = grown
            M = int(grown.max())
            o = decode_attention(q[:, :, 0].contiguous(), self._K[l_][:B, :, :M], self._V[l_][:B, :, :M], grown,
                                 a.scale_of(l_), backend=self.backend)
            h = a.finish_layer(l_, h, o.reshape(B, 1, -1))
        logits = a.logits(h)
        self.steps += 1
        self.batch_sizes.append(B)
        for s in seqs:
            s.pos += 1
        # sampled for the whole batch at once where it can be: the log-softmax, the greedy choices and the chosen
        # tokens' logprobs are one op each instead of one per sequence
        lp = torch.log_softmax(logits, dim=-1)
        greedy = torch.argmax(logits, dim=-1).tolist()
        toks = [greedy[b] if s.req.sampling.temperature <= 0 else None for b, s in enumerate(seqs)]
        for b, s in enumerate(seqs):
            if toks[b] is None and not s.req.cancelled.is_set():
                toks[b] = self._choose(s, logits[b])
        chosen = lp[torch.arange(B), torch.tensor([t if t is not None else 0 for t in toks])].tolist()
        for b, s in enumerate(seqs):
            self._emit(s, logits[b], toks[b], lp[b], chosen[b])

    def _choose(self, s: Sequence, logits: torch.Tensor) -> int:
        sp = s.req.sampling
        if sp.temperature <= 0:
            return int(torch.argmax(logits))
        x = logits / sp.temperature
        if sp.top_k > 0 and sp.top_k < x.numel():
            kth = torch.topk(x, sp.top_k).values[-1]
            x = x.masked_fill(x < kth, float("-inf"))
        if sp.top_p < 1.0:
            sorted_x, order = torch.sort(x, descending=False)
            cum = torch.softmax(sorted_x, dim=-1).cumsum(dim=-1)
            remove = cum <= (1 - sp.top_p)
            remove[-1] = False
            x = x.masked_fill(remove.scatter(0, order, remove), float("-inf"))
        probs = torch.softmax(x, dim=-1)
        return int(torch.multinomial(probs, 1, generator=s.generator))

    def _emit(self, s: Sequence, logits: torch.Tensor, tok: int | None = None, lp: torch.Tensor | None = None,
              tok_lp: float | None = None) -> None:
        """Choose (unless the decode step chose for the batch: tok, its log-softmax row lp and tok's logprob) and
        deliver the next token of s."""
        sp = s.req.sampling
        if s.req.cancelled.is_set():
            s.finish = "cancelled"
            return
        if tok is None:
            tok = self._choose(s, logits)
        if lp is None:
            lp = torch.log_softmax(logits, dim=-1)
        if tok_lp is None:
            tok_lp = float(lp[tok])
        top = []
        if sp.logprobs > 0:
            vals, idx = torch.topk(lp, min(sp.logprobs, lp.numel()))
            top = [(int(i), self.tokenizer.decode([int(i)]), float(v)) for v, i in zip(vals, idx, strict=True)]
        s.generated.append(tok)
        now = time.monotonic()
        if s.first_token_at is None:
            s.first_token_at = now
            self.ttft.append(now - s.req.submitted)
        self.tokens_out += 1
        is_eos = tok in self.eos_ids and not sp.ignore_eos
        text = self._decode(s.generated)
        delta, stop_at = "", -1
        if sp.stop:
            start = max(0, s.emitted - max(len(x) for x in sp.stop))
            hits = [i for i in (text.find(x, start) for x in sp.stop) if i >= 0]
            stop_at = min(hits) if hits else -1
        if stop_at >= 0:
            s.final_text = text[:stop_at]
            delta = s.final_text[s.emitted:] if stop_at > s.emitted else ""
            s.finish = "stop"
        elif is_eos or len(s.generated) >= sp.max_new_tokens:
            s.final_text = text
            delta = text[s.emitted:]
            s.finish = "stop" if is_eos else "length"
        else:
            safe = len(text)
            if text.endswith("\ufffd"):
                safe -= 1
            for x in sp.stop:
                for j in range(min(len(x) - 1, safe), 0, -1):
                    if text[:safe].endswith(x[:j]):
                        safe = min(safe, len(text[:safe]) - j)
                        break
            safe = max(safe, s.emitted)
            delta = text[s.emitted:safe]
        s.emitted += len(delta)
        s.req.on_event(TokenEvent(tok, delta, tok_lp, top))

    def _retire(self) -> None:
        keep = []
        for s in self.running:
            if s.finish is None and s.req.cancelled.is_set():
                s.finish = "cancelled"
            if s.finish is None:
                keep.append(s)
            else:
                self._leave(s)
        if len(keep) != len(self.running):
            self._compact(keep)
        with self._lock:
            self.running = keep
        if not keep:
            self._release()  # nothing runs: the batch cache's memory goes back

    def _leave(self, s: Sequence, error: BaseException | None = None) -> None:
        a = self.adapter
        elem = s.k[0].element_size()
        # the tokens an uncompressed cache holds now: the prompt and every generated token but the last, whose keys
        # and values are never computed (nothing is decoded after it)
        cached = s.full_tokens + max(len(s.generated) - 1, 0)
        per_layer = sum(cached if w is None else min(cached, w) for w in a.windows)  # a sliding layer holds <= W
        full = per_layer * s.k[0].shape[0] * (s.k[0].shape[-1] + s.v[0].shape[-1]) * elem
        held = s.cache_bytes()
        text = s.final_text if s.final_text is not None else self.tokenizer.decode(s.generated,
                                                                                   skip_special_tokens=True)
        s.k, s.v, s.positions = [], [], []  # drop the cache now
        self.freed_sequences += 1
        ttft = (s.first_token_at - s.req.submitted) if s.first_token_at else 0.0
        s.req.on_event(Finished(s.finish or "error", text, list(s.generated), len(s.req.prompt_ids),
                                len(s.generated), held, full, s.kept_fraction, ttft, True, error, s.budgets))


def check_cancelled_error(fin: Finished) -> None:
    if fin.finish_reason == "cancelled":
        raise Cancelled("generation cancelled")
