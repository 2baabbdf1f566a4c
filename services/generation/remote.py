"""The remote backend: a model served by an outside OpenAI-compatible server (vLLM, KServe's Hugging Face runtime,
TGI, or praxon's own `praxon predictor generation`), configured per model name in GenerationConfig.remote_models.

Generate and GenerateStream forward to the server's /completions with stream=true (one path for both; Generate
collects) and turn its chunks into the engine's own events (services.generation.engine.TokenEvent / Finished), so
the servicer answers exactly as for a local model. Logprobs: the upstream's per-token logprobs and top
alternatives (`logprobs` = the request's top_logprobs). What the OpenAI API cannot carry is left empty and said so:
token ids are 0 (the API returns token strings, not ids) and the cache statistics are zero (the cache lives
upstream). Generate with uncertainty makes its own non-streamed requests through complete() (greedy single tokens
with their top-20 alternatives for beam search and SDLG, seeded samples for the baselines: see
services.generation.uncertainty.RemoteLM). KV-cache compression is the local engine's: a compressing policy on a remote model is FAILED_PRECONDITION
(raised by the servicer, naming the backend). A client that goes away closes the upstream stream, which cancels the
generation there.

Upstream answers -> the project's errors: 400 -> INVALID_ARGUMENT on the matching field when there is one (else
FAILED_PRECONDITION: the upstream refused a request this service considers valid); 401/403/404 ->
FAILED_PRECONDITION (configuration); 429 -> RESOURCE_EXHAUSTED with its Retry-After; 5xx, refused connections and
timeouts -> UNAVAILABLE."""
from __future__ import annotations

import json
import math
import os
import time
from collections.abc import AsyncIterator

import httpx

from services.common.errors import FailedPrecondition, InvalidArgument, ResourceExhausted, Unavailable
from services.generation.engine import Finished, SamplingParams, TokenEvent
from services.generation.settings import RemoteModel

# the upstream's parameter names -> this service's field paths
FIELDS = {"prompt": "prompt", "max_tokens": "sampling.max_new_tokens", "temperature": "sampling.temperature",
          "top_p": "sampling.top_p", "top_k": "sampling.top_k", "stop": "sampling.stop", "seed": "sampling.seed",
          "logprobs": "sampling.top_logprobs"}


class RemoteBackend:
    """One remote model: its upstream and an HTTP client (created on first use, on the caller's event loop)."""

    def __init__(self, name: str, cfg: RemoteModel):
        self.name, self.cfg = name, cfg
        self.url = cfg.base_url.rstrip("/") + "/completions"
        self.upstream_model = cfg.model or name
        key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else ""  # read once, at startup
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client: httpx.AsyncClient | None = None
        self._sync: httpx.Client | None = None   # the uncertainty estimate's (it runs in a worker thread)

    def describe(self) -> str:
        return f"remote OpenAI-compatible server {self.cfg.base_url}"

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        if self._sync is not None:
            self._sync.close()

    def complete(self, prompt: str, *, max_tokens: int, temperature: float, logprobs: int, seed: int | None = None,
                 stop: tuple[str, ...] = ()) -> dict:
        """One non-streamed /completions request, blocking (services.generation.uncertainty.RemoteLM calls it from
        the estimate's worker thread): its first choice (text, logprobs with tokens, token_logprobs, top_logprobs,
        finish_reason). Errors as for events(), except that a refused `logprobs` is FAILED_PRECONDITION: the
        estimate, not the caller, chose the number it asks for."""
        if self._sync is None:
            self._sync = httpx.Client(timeout=httpx.Timeout(self.cfg.timeout_s, connect=10.0))
        body = {"model": self.upstream_model, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
                "logprobs": logprobs}
        if stop:
            body["stop"] = list(stop)
        if seed is not None:
            body["seed"] = seed
        try:
            resp = self._sync.post(self.url, json=body, headers=self.headers)
        except httpx.TimeoutException:
            raise Unavailable(f"{self.describe()} timed out", reason="REMOTE_TIMEOUT") from None
        except httpx.HTTPError as exc:
            raise Unavailable(f"{self.describe()} is unreachable: {type(exc).__name__}",
                              reason="REMOTE_UNAVAILABLE") from None
        if resp.status_code != 200:
            err = _error_body(resp.content)
            if resp.status_code == 400 and err.get("param") == "logprobs":
                raise FailedPrecondition(f"{self.describe()} refuses logprobs={logprobs}, which the uncertainty "
                                         f"estimate needs (the top alternatives of each token): "
                                         f"{err.get('message') or ''}", reason="REMOTE_REJECTED",
                                         metadata={"backend": self.cfg.base_url, "field": "uncertainty"})
            raise self._error(resp.status_code, err, resp.headers)
        try:
            return resp.json()["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise Unavailable(f"{self.describe()} answered a completion without choices",
                              reason="REMOTE_FAILED") from None

    def body(self, prompt: str, s: SamplingParams) -> dict:
        body = {"model": self.upstream_model, "prompt": prompt, "max_tokens": s.max_new_tokens,
                "temperature": s.temperature, "top_p": s.top_p, "logprobs": s.logprobs, "stream": True,
                "stream_options": {"include_usage": True}}
        if s.stop:
            body["stop"] = list(s.stop)
        if s.seed is not None:
            body["seed"] = s.seed
        if s.top_k > 0:       # vLLM's extension: sent only when asked for, so plain OpenAI servers accept the rest
            body["top_k"] = s.top_k
        if s.ignore_eos:      # likewise
            body["ignore_eos"] = True
        return body

    async def events(self, prompt: str, sampling: SamplingParams) -> AsyncIterator[TokenEvent | Finished]:
        """TokenEvent... then one Finished, like the local engine's."""
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.cfg.timeout_s, connect=10.0))
        started = time.monotonic()
        first_at = None
        text, n_tokens, finish, usage = [], 0, "length", {}
        try:
            async with self._client.stream("POST", self.url, json=self.body(prompt, sampling),
                                           headers=self.headers) as resp:
                if resp.status_code != 200:
                    await resp.aread()
                    raise self._error(resp.status_code, _error_body(resp.content), resp.headers)
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    if "error" in chunk:
                        raise Unavailable(f"{self.describe()} failed mid-stream: "
                                          f"{(chunk['error'] or {}).get('message', '')}", reason="REMOTE_FAILED")
                    usage = chunk.get("usage") or usage
                    for choice in chunk.get("choices") or []:
                        for ev in _token_events(choice, sampling.logprobs):
                            first_at = first_at or time.monotonic()
                            n_tokens += 1
                            text.append(ev.text)
                            yield ev
                        finish = choice.get("finish_reason") or finish
        except httpx.TimeoutException:
            raise Unavailable(f"{self.describe()} timed out", reason="REMOTE_TIMEOUT") from None
        except httpx.HTTPError as exc:
            raise Unavailable(f"{self.describe()} is unreachable: {type(exc).__name__}",
                              reason="REMOTE_UNAVAILABLE") from None
        yield Finished(finish if finish in ("stop", "length") else "stop", "".join(text), [],
                       int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or n_tokens),
                       0, 0, 0.0, (first_at - started) if first_at else 0.0)

    def _error(self, status: int, err: dict, headers) -> Exception:
        msg = f"{self.describe()} answered {status}: {err.get('message') or ''}".strip()
        meta = {"backend": self.cfg.base_url}
        if status == 400 and err.get("param") in FIELDS:
            return InvalidArgument(FIELDS[err["param"]], err.get("message") or "refused by the remote backend")
        if status == 429:
            retry = _retry_after(headers.get("retry-after"))
            return ResourceExhausted(msg, retry_after_s=retry, reason="REMOTE_RATE_LIMITED")
        if status in (400, 401, 403, 404, 422):
            return FailedPrecondition(msg, reason="REMOTE_REJECTED", metadata=meta)
        return Unavailable(msg, reason="REMOTE_UNAVAILABLE")


def _token_events(choice: dict, top_n: int) -> list[TokenEvent]:
    """The tokens of one streamed completion choice; its text goes with the first of them."""
    text = choice.get("text") or ""
    lp = choice.get("logprobs") or {}
    tokens = lp.get("tokens") or []
    if not tokens:
        return [TokenEvent(0, text, math.nan, [])] if text else []  # no logprobs from this server: NaN, not 0
    logprobs = lp.get("token_logprobs") or [math.nan] * len(tokens)
    tops = lp.get("top_logprobs") or [None] * len(tokens)
    return [TokenEvent(0, text if i == 0 else "", float(logprobs[i] if logprobs[i] is not None else math.nan),
                       [(0, t, float(v)) for t, v in sorted((tops[i] or {}).items(), key=lambda kv: -kv[1])][:top_n])
            for i in range(len(tokens))]


def _error_body(content: bytes) -> dict:
    try:
        err = json.loads(content).get("error")
    except (ValueError, AttributeError):
        return {"message": content[:200].decode(errors="replace")}
    return err if isinstance(err, dict) else {"message": str(err)}


def _retry_after(value: str | None) -> float:
    try:
        return max(float(value), 0.0) if value else 1.0
    except ValueError:
        return 1.0
