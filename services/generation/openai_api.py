"""OpenAI-compatible completions and chat completions over the generation engine.

This follows the OpenAI API shape that kserve exposes for generative models (`kserve.protocol.rest.openai`:
/openai/v1/completions, /openai/v1/chat/completions, /openai/v1/models), written here without vllm: kserve 0.21
takes its request/response types from vllm, which does not install beside this project's torch. The same paths are
served under /v1 as well, so a client with base_url=http://host:port/v1 (the `openai` package, LangChain, ...) works.

Requests are validated by the pydantic models below (an unknown or unsupported field -> 400 naming it) and run on
the service's own continuous-batching Engine (services.generation.engine) through the same submit/events path as
the gRPC servicer (services.generation.api.submit / engine_events): there is no second generation loop.

Supported: prompt (a string or a list of one string), messages (chat: the tokenizer's chat template when it has
one, else CHAT_FALLBACK below), max_tokens (chat also max_completion_tokens), temperature, top_p, n = 1, stop, seed,
logprobs / top_logprobs, stream (server-sent events ending with "data: [DONE]"; stream_options.include_usage adds a
last chunk with the usage), user (ignored); vLLM's extensions top_k and ignore_eos. Errors use OpenAI's body
{"error": {"message", "type", "param", "code"}}: 400 for a bad field, 404 for an unknown model, 429 with
Retry-After when the engine's queue is full, 503 with Retry-After while the model is loading.

Refused as the gRPC service refuses them: a NUL character in any string of the request (prompt, message content,
stop, user, ...; 400 with param naming it, e.g. "messages[0].content"); a chat message without content (content is
optional in OpenAI's API only for an assistant message that carries tool_calls, and no tools are served here).
OpenAIErrorBodies (added by services.generation.predictor) gives the errors produced outside these routes (the
predictor's bearer-token 401, an unknown route's 404, ...) the same OpenAI body."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

from fastapi import Request  # at module level: FastAPI resolves the handlers' (string) annotations here
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.common import oip
from services.common.errors import FailedPrecondition, InvalidArgument, NotFound, PraxonError
from services.generation.settings import GenerationConfig

log = logging.getLogger(__name__)

PREFIXES = ("/openai/v1", "/v1")
# Chat prompt for a tokenizer without a chat template (the models trained here have none): one "role: content"
# line per message, then "assistant:" for the model to continue.
CHAT_FALLBACK = "{role}: {content}\n"
ENGINE_FIELDS = {"max_new_tokens": "max_tokens", "prompt": "prompt"}  # engine.check's field names -> OpenAI's


class OpenAIError(Exception):
    """An error answered in OpenAI's shape."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type_: str = "invalid_request_error", headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type_
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


# ---------------------------------------------------------------------------------------------- request models
class _Request(BaseModel):
    # an unknown field is refused (400 naming it) rather than silently ignored: the caller asked for something
    # this server does not do
    model_config = ConfigDict(extra="forbid")

    model: str
    max_tokens: int | None = None
    temperature: float = 1.0        # OpenAI's default: sampling
    top_p: float = 1.0
    n: int = 1
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    user: str | None = None
    frequency_penalty: float = 0.0   # accepted only at their neutral values (clients send them by default)
    presence_penalty: float = 0.0
    top_k: int = 0                   # vLLM extension; -1 or 0: off
    ignore_eos: bool = False         # vLLM extension


class CompletionRequest(_Request):
    prompt: str | list[str]
    max_tokens: int | None = 16      # OpenAI's default for completions
    logprobs: int | None = None
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None


def _param(loc: tuple) -> str:
    """pydantic's error location -> a field path ("messages[0].role"); the names of union members pydantic adds
    ("str", "list[str]", model class names) are left out."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.isidentifier() and part.islower() and part not in ("str", "int", "float", "bool", "list", "dict"):
            out += f".{part}" if out else part
    return out


def nul_param(body: Any) -> str | None:
    """The path of the first string (value or key) in a JSON body that contains a NUL character, as a param
    ("messages[1].content", "stop[0]"); None when there is none. Iterative: a body nested as deep as the JSON
    parser allows is walked without recursion."""
    todo: list[tuple[str, Any]] = [("", body)]
    while todo:
        path, value = todo.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return path or "body"
        elif isinstance(value, dict):
            subs = []
            for k, v in value.items():
                sub = f"{path}.{k}" if path else str(k)
                if "\x00" in str(k):
                    return sub.replace("\x00", "\\u0000")
                subs.append((sub, v))
            todo.extend(reversed(subs))  # popped in the body's order
        elif isinstance(value, list):
            todo.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(value)]))
    return None


def parse(model: type[BaseModel], body: Any) -> Any:
    """The request model of a body, refusing (400 naming the field) a NUL character anywhere in it (the gRPC
    service's content rule, services.common.server.check_request_content) and whatever pydantic refuses."""
    param = nul_param(body)
    if param is not None:
        raise OpenAIError(400, f"{param}: must not contain a NUL character", param=param, code="nul_character")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = _param(err["loc"])
        msg = "not supported by this server" if err["type"] == "extra_forbidden" else err["msg"]
        raise OpenAIError(400, f"{param}: {msg}", param=param or None, code="invalid_value") from None


def bad(param: str, message: str) -> OpenAIError:
    return OpenAIError(400, f"{param}: {message}", param=param, code="invalid_value")


# ---------------------------------------------------------------------------------------------- the service
class OpenAIService:
    """The OpenAI routes of one served model. `current()` returns the LoadedLM (services.generation.api) to use
    now (a fixed one, or a ModelCache lookup that follows an alias); `names` are the model names a request may
    give (the first is the id listed by /models)."""

    def __init__(self, current: Callable[[], Awaitable[Any]], names: list[str], config: GenerationConfig):
        self.current, self.names, self.config = current, [n for n in dict.fromkeys(names) if n], config
        self.created = int(time.time())

    # -- shared checks
    def _loaded(self, req: _Request) -> Awaitable[Any]:
        if req.model not in self.names:
            raise OpenAIError(404, f"the model {req.model!r} does not exist; this server serves "
                              f"{', '.join(map(repr, self.names))}", param="model", code="model_not_found")
        return self.current()

    def _sampling(self, req: _Request, max_tokens: int | None, top_n: int):
        from services.generation.engine import SamplingParams

        cfg = self.config
        for name in ("frequency_penalty", "presence_penalty"):
            if getattr(req, name) != 0:
                raise bad(name, "only 0 is supported by this server")
        if req.n != 1:
            raise bad("n", "only n = 1 is supported by this server")
        if max_tokens is not None and not 1 <= max_tokens <= cfg.max_new_tokens:
            raise bad("max_tokens", f"must be in 1..{cfg.max_new_tokens}")
        if not math.isfinite(req.temperature) or not 0 <= req.temperature <= 100:
            raise bad("temperature", "must be in [0, 100] (0 is greedy)")
        if not math.isfinite(req.top_p) or not 0 < req.top_p <= 1:
            raise bad("top_p", "must be in (0, 1]")
        if req.top_k < -1:
            raise bad("top_k", "must be >= -1 (-1 and 0 are off)")
        stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        if len(stop) > cfg.max_stop:
            raise bad("stop", f"at most {cfg.max_stop} stop strings")
        for i, s in enumerate(stop):
            if not s or len(s) > 256:
                raise bad(f"stop[{i}]" if not isinstance(req.stop, str) else "stop", "1..256 characters")
        if req.seed is not None and not 0 <= req.seed < 2 ** 63:
            raise bad("seed", "must be >= 0")
        if not 0 <= top_n <= cfg.max_top_logprobs:
            raise bad("logprobs" if isinstance(req, CompletionRequest) else "top_logprobs",
                      f"must be in 0..{cfg.max_top_logprobs}")
        if req.stream_options is not None and (not req.stream or set(req.stream_options) - {"include_usage"}):
            raise bad("stream_options", "only {include_usage} with stream = true")
        return SamplingParams(max_new_tokens=max_tokens or 1, temperature=req.temperature, top_k=max(req.top_k, 0),
                              top_p=req.top_p, seed=req.seed, stop=tuple(stop), logprobs=top_n,
                              ignore_eos=req.ignore_eos)

    async def _prepare(self, loaded, sampling, text: str, field: str, max_tokens: int | None):
        """(prompt ids, SamplingParams); max_tokens None: as many as the context leaves (up to the server's cap)."""
        if len(text) > self.config.max_prompt_chars:
            raise bad(field, f"at most {self.config.max_prompt_chars} characters")
        engine = loaded.engine
        ids = await asyncio.to_thread(engine.encode, text)
        if max_tokens is None:
            room = max(engine.max_context - len(ids), 1)
            sampling = dataclasses.replace(sampling, max_new_tokens=min(room, self.config.max_new_tokens))
        try:
            engine.check(ids, sampling, field)
        except InvalidArgument as exc:
            v = exc.violations[0]
            param = ENGINE_FIELDS.get(v.field, v.field)
            raise bad(param, v.description) from None
        return ids, sampling

    def _chat_text(self, req: ChatCompletionRequest, tokenizer) -> str:
        messages = []
        for i, m in enumerate(req.messages):
            if isinstance(m.content, list):
                parts = []
                for j, p in enumerate(m.content):
                    if p.type != "text" or p.text is None:
                        raise bad(f"messages[{i}].content[{j}]", "only text parts are supported")
                    parts.append(p.text)
                content = "".join(parts)
            else:
                content = m.content or ""
            messages.append({"role": m.role, "content": content})
        if getattr(tokenizer, "chat_template", None):
            try:
                return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            except Exception as exc:  # noqa: BLE001 - a template's own refusal (e.g. roles out of order) is the caller's
                raise bad("messages", f"the model's chat template refused the messages: {exc}") from None
        return "".join(CHAT_FALLBACK.format(**m) for m in messages) + "assistant:"

    # -- endpoints
    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.names[0], "object": "model", "created": self.created,
                                            "owned_by": "praxon"}]}

    async def completions(self, body: Any) -> dict | AsyncIterator[str]:
        req: CompletionRequest = parse(CompletionRequest, body)
        if req.echo:
            raise bad("echo", "not supported by this server")
        if req.best_of not in (None, 1):
            raise bad("best_of", "only 1 is supported by this server")
        if req.suffix is not None:
            raise bad("suffix", "not supported by this server")
        prompt = req.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise bad("prompt", "give one prompt (a string or a list of one string)")
            prompt = prompt[0]
        if not prompt:
            raise bad("prompt", "must not be empty")
        sampling = self._sampling(req, req.max_tokens, req.logprobs or 0)
        loaded = await self._loaded(req)
        ids, sampling = await self._prepare(loaded, sampling, prompt, "prompt", req.max_tokens)
        return await self._respond(req, loaded, ids, sampling, chat=False, want_logprobs=req.logprobs is not None)

    async def chat_completions(self, body: Any) -> dict | AsyncIterator[str]:
        req: ChatCompletionRequest = parse(ChatCompletionRequest, body)
        for i, m in enumerate(req.messages):  # missing or null: both refused
            if m.content is None:
                raise bad(f"messages[{i}].content", "an assistant message without content is one that carries "
                          "tool_calls, and this server supports no tools" if m.role == "assistant" else
                          "required (a string or a list of text parts)")
        if req.top_logprobs is not None and not req.logprobs:
            raise bad("top_logprobs", "needs logprobs = true")
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        if req.max_completion_tokens is not None and req.max_tokens is not None:
            raise bad("max_completion_tokens", "give max_tokens or max_completion_tokens, not both")
        sampling = self._sampling(req, max_tokens, req.top_logprobs or 0)
        loaded = await self._loaded(req)
        text = self._chat_text(req, loaded.tokenizer)
        ids, sampling = await self._prepare(loaded, sampling, text, "messages", max_tokens)
        return await self._respond(req, loaded, ids, sampling, chat=True, want_logprobs=req.logprobs)

    # -- responses
    async def _respond(self, req: _Request, loaded, ids, sampling, *, chat: bool, want_logprobs: bool):
        from services.generation.api import engine_events, submit
        from services.generation.engine import Finished
        from services.generation.kvpolicy import CachePolicy

        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        head = {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
                "model": req.model}
        tokenizer = loaded.tokenizer
        r, events = submit(loaded.engine, ids, sampling, CachePolicy())  # refused at once when the queue is full

        def logprobs_of(tokens: list, offset: int) -> dict:
            strs = [tokenizer.decode([t.token_id]) for t in tokens]
            if chat:
                return {"content": [{"token": s, "logprob": t.logprob, "bytes": list(s.encode()),
                                     "top_logprobs": [{"token": x, "logprob": lp, "bytes": list(x.encode())}
                                                      for _, x, lp in t.top_logprobs]}
                                    for s, t in zip(strs, tokens, strict=True)]}
            offsets, at = [], offset
            for s in strs:
                offsets.append(at)
                at += len(s)
            return {"tokens": strs, "token_logprobs": [t.logprob for t in tokens],
                    "top_logprobs": [{x: lp for _, x, lp in t.top_logprobs} or {s: t.logprob}
                                     for s, t in zip(strs, tokens, strict=True)],
                    "text_offset": offsets}

        def usage(fin) -> dict:
            return {"prompt_tokens": fin.prompt_tokens, "completion_tokens": fin.completion_tokens,
                    "total_tokens": fin.prompt_tokens + fin.completion_tokens}

        if not req.stream:
            tokens = []
            try:
                async for e in engine_events(r, events):
                    if isinstance(e, Finished):
                        lp = logprobs_of(tokens, 0) if want_logprobs else None
                        choice = ({"index": 0, "message": {"role": "assistant", "content": e.text}, "logprobs": lp,
                                   "finish_reason": e.finish_reason} if chat else
                                  {"index": 0, "text": e.text, "logprobs": lp, "finish_reason": e.finish_reason})
                        return {**head, "choices": [choice], "usage": usage(e)}
                    tokens.append(e)
            finally:
                r.cancel()  # a client that went away frees its sequence
            raise OpenAIError(500, "the engine ended without an answer", type_="server_error")

        include_usage = bool((req.stream_options or {}).get("include_usage"))
        chunk_object = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: str | None, tokens: list, finish: str | None, offset: int, first: bool = False) -> str:
            lp = logprobs_of(tokens, offset) if want_logprobs and tokens else None
            if chat:
                delta: dict = {} if text is None else {"content": text}
                if first:
                    delta = {"role": "assistant", "content": ""}
                choice = {"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "logprobs": lp, "finish_reason": finish}
            return sse({**head, "object": chunk_object, "choices": [choice]})

        async def stream() -> AsyncIterator[str]:
            offset = 0
            try:
                if chat:
                    yield chunk(None, [], None, 0, first=True)
                async for e in engine_events(r, events):
                    if isinstance(e, Finished):
                        yield chunk(None if chat else "", [], e.finish_reason, offset)
                        if include_usage:
                            yield sse({**head, "object": chunk_object, "choices": [], "usage": usage(e)})
                        break
                    if e.text or want_logprobs:  # text held back (a possible stop string) comes with a later token
                        yield chunk(e.text, [e], None, offset)
                        offset += len(e.text)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the status line is sent: report in the stream, as vLLM does
                yield sse(error_of(exc).body())
            finally:
                r.cancel()  # the client disconnected mid-stream: free the sequence now
            yield "data: [DONE]\n\n"
        return stream()


def sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def error_of(exc: BaseException) -> OpenAIError:
    """The project's errors in OpenAI's shape; anything else is a server bug (500 with a request id, traceback in
    the log)."""
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, InvalidArgument):
        v = exc.violations[0]
        return bad(ENGINE_FIELDS.get(v.field, v.field), v.description)
    if isinstance(exc, NotFound) or (isinstance(exc, FailedPrecondition) and exc.reason == "MODEL_NOT_REGISTERED"):
        return OpenAIError(404, exc.message, param="model", code="model_not_found")
    if isinstance(exc, PraxonError):  # the predictors' one HTTP mapping (status, Retry-After), in OpenAI's shape
        status, _, headers = oip.http_error(exc)
        return OpenAIError(status, exc.message, code=exc.reason.lower(), headers=headers,
                           type_="rate_limit_error" if status == 429 else "server_error" if status >= 500
                           else "invalid_request_error")
    request_id = uuid.uuid4().hex
    log.error("openai request %s failed", request_id, exc_info=exc)
    return OpenAIError(500, f"internal error (request id {request_id})", type_="server_error")


class ClientGone(Exception):
    """The HTTP client disconnected before its answer was ready."""


async def until_disconnected(request: Request, work: Awaitable[Any]) -> Any:
    """Await `work`, cancelling it when the HTTP client disconnects first: Starlette cancels a streaming response
    whose client left, but not a handler still computing a JSON answer, so without this a non-streaming
    completion would generate to the end for nobody. Cancelling unwinds engine_events, which cancels the engine
    request and frees its sequence. The disconnect is seen the way Starlette's StreamingResponse sees it: the body
    has been read, so the next ASGI receive() is the http.disconnect message."""
    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    task, watch = asyncio.ensure_future(work), asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()  # the client left (or this handler itself was cancelled)
            await asyncio.wait({task})  # let it unwind: its engine request is cancelled on the way out
    if task.cancelled():
        raise ClientGone()
    return task.result()


def router(service: OpenAIService):
    """A FastAPI router with the OpenAI paths under /openai/v1 and /v1. Bodies are read and validated here (not by
    FastAPI), so every error has OpenAI's shape whatever app the router is mounted on."""
    from fastapi import APIRouter
    from fastapi.responses import JSONResponse, Response, StreamingResponse

    def error_response(exc: BaseException) -> JSONResponse:
        err = error_of(exc)
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    def endpoint(method):
        async def handle(request: Request):
            try:
                try:
                    body = await request.json()
                except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
                    raise OpenAIError(400, "the body is not valid JSON") from None
                if not isinstance(body, dict):
                    raise OpenAIError(400, "the body must be a JSON object")
                out = await until_disconnected(request, method(body))
            except ClientGone:
                return Response(status_code=499)  # nginx's "client closed request": nobody reads it
            except Exception as exc:  # noqa: BLE001 - every error answered in OpenAI's shape
                return error_response(exc)
            if isinstance(out, dict):
                return JSONResponse(out)
            return StreamingResponse(out, media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return handle

    async def models():
        return JSONResponse(service.models())

    r = APIRouter()
    for prefix in PREFIXES:
        r.add_api_route(f"{prefix}/completions", endpoint(service.completions), methods=["POST"])
        r.add_api_route(f"{prefix}/chat/completions", endpoint(service.chat_completions), methods=["POST"])
        r.add_api_route(f"{prefix}/models", models, methods=["GET"])
    return r


# ---------------------------------------------------------------------------------------------- other errors
OIP_PATHS = ("/v2/",)  # Open Inference Protocol v2: its clients (tritonclient, kserve's) read {"error": "<string>"}


def openai_error_body(status: int, body: bytes, method: str, path: str) -> bytes | None:
    """An error answer's body in OpenAI's shape, or None when it has that shape already. Understood: OIP's
    {"error": "<message>", "reason": ...} (the predictor's token check, services.common.oip.http_error),
    Starlette's {"detail": ...} (an unknown route, a method not allowed) and plain text."""
    try:
        found = json.loads(body) if body else None
    except ValueError:
        found = None
    if isinstance(found, dict) and isinstance(found.get("error"), dict) and "message" in found["error"]:
        return None
    reason = found.get("reason") if isinstance(found, dict) else None
    code = reason.lower() if isinstance(reason, str) and reason else None
    if isinstance(found, dict) and isinstance(found.get("error"), str):
        message = found["error"]
    elif isinstance(found, dict) and "detail" in found:
        detail = found["detail"]
        message = detail if isinstance(detail, str) else json.dumps(detail)
    else:
        message = body.decode("utf-8", "replace").strip()
    if status == 401:
        code = "invalid_api_key"
    elif status == 404 and message == "Not Found":  # no such route (Starlette's router): OpenAI's wording
        message, code = f"Invalid URL ({method} {path})", code or "unknown_url"
    elif status == 405:
        message, code = f"{message or 'Method Not Allowed'} ({method} {path})", code or "method_not_allowed"
    if not message:
        message = f"HTTP {status}"
    type_ = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
    return json.dumps(OpenAIError(status, message, code=code, type_=type_).body(), ensure_ascii=False).encode()


class OpenAIErrorBodies:
    """ASGI middleware, outermost on the predictor's app: every error answer (status >= 400) that does not have
    OpenAI's body gets it, keeping its status and headers (WWW-Authenticate, Retry-After). It is there for the
    answers made outside the OpenAI routes: the 401 of the bearer-token check (services.common.oip's
    BearerAuthMiddleware, shared by every predictor and answering OIP's {"error": "<string>"}, which the `openai`
    client shows only as "Error code: 401"), Starlette's 404 for an unknown route and 405, kserve's handlers. Paths
    under OIP_PATHS keep OIP's shape: they are the Open Inference Protocol's, whose clients read that. Successful
    answers and streams pass through untouched; an error body is buffered (it is small) and rewritten."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"].startswith(OIP_PATHS) or scope.get("method") == "HEAD":
            return await self.app(scope, receive, send)
        start: dict | None = None
        chunks: list[bytes] = []

        async def send_openai(message):
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400:
                start = message  # held until the body is complete
                return
            if start is None or message["type"] != "http.response.body":
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            new = openai_error_body(start["status"], body, scope.get("method", ""), scope["path"])
            headers = list(start.get("headers") or ())
            if new is not None:
                body = new
                headers = [(k, v) for k, v in headers if k.lower() not in (b"content-length", b"content-type")]
                headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, send_openai)
