"""GenerationService: proto <-> domain. Models come from the registry through ModelCache (name/version/alias, hot
swap); each loaded version owns one continuous-batching Engine (services.generation.engine). A model name listed in
the settings' remote_models is forwarded to an OpenAI-compatible server instead (services.generation.remote; its
LoadedLM has the RemoteBackend as engine and no tokenizer). Import and training are jobs (services.generation.jobs)."""
from __future__ import annotations

import asyncio
import math
import re
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

import grpc
from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from praxon.generation.v1 import generation_pb2 as pb
from praxon.generation.v1 import generation_pb2_grpc
from services.common import convert
from services.common.errors import FailedPrecondition, InvalidArgument, NotFound
from services.common.jobs import parse_uuid
from services.common.params import parse_params
from services.common.server import AppContext, current_tenant
from services.common.serving import ModelCache, ref_key
from services.common.spec import service_settings
from services.generation.params import ImportParams, TrainParams
from services.generation.settings import GenerationConfig

IMPORT_KIND, TRAIN_KIND = "generation.import", "generation.train"
NLI_TRAIN_KIND, NLI_IMPORT_KIND = "generation.nli_train", "generation.nli_import"
UNCERTAINTY_METHODS = {pb.UNCERTAINTY_METHOD_UNSPECIFIED: "sdlg", pb.UNCERTAINTY_METHOD_SDLG: "sdlg",
                       pb.UNCERTAINTY_METHOD_MULTINOMIAL: "multinomial", pb.UNCERTAINTY_METHOD_PREDICTIVE: "predictive",
                       pb.UNCERTAINTY_METHOD_LEXICAL: "lexical"}
UNCERTAINTY_ENUM = {v: k for k, v in UNCERTAINTY_METHODS.items() if k}
NLI_TRAIN_FIELDS = [f.name for f in pb.NLITrainingParams.DESCRIPTOR.fields]
POLICIES = {pb.CACHE_POLICY_UNSPECIFIED: "none", pb.CACHE_POLICY_NONE: "none", pb.CACHE_POLICY_VL_CACHE: "vl_cache",
            pb.CACHE_POLICY_H2O: "h2o", pb.CACHE_POLICY_STREAMING_LLM: "streaming_llm"}
POLICY_ENUM = {"none": pb.CACHE_POLICY_NONE, "vl_cache": pb.CACHE_POLICY_VL_CACHE, "h2o": pb.CACHE_POLICY_H2O,
               "streaming_llm": pb.CACHE_POLICY_STREAMING_LLM}
FINISH = {"stop": pb.FINISH_REASON_STOP, "length": pb.FINISH_REASON_LENGTH, "cancelled": pb.FINISH_REASON_CANCELLED}
TRAIN_FIELDS = [f.name for f in pb.LanguageModelTrainingParams.DESCRIPTOR.fields]
MAX_INT32 = 2 ** 31 - 1


@dataclass
class LoadedLM:
    engine: Any
    tokenizer: Any
    info: pb.ModelInfo


_ENGINES: "weakref.WeakSet[Any]" = weakref.WeakSet()


class _EngineCollector:
    """Prometheus: running/queued sequences, cache bytes, tokens and mean time to first token of live engines.
    Tokens generated only grow, so they are a counter (exposed as praxon_generation_tokens_out_total, for rate())."""

    def collect(self):
        names = {"running": "sequences decoding", "queued": "requests waiting", "cache_bytes": "KV bytes held",
                 "mean_ttft_s": "mean time to first token (last 1000)"}
        fams = {k: GaugeMetricFamily(f"praxon_generation_{k}", d, labels=["model"]) for k, d in names.items()}
        fams["tokens_out"] = CounterMetricFamily("praxon_generation_tokens_out", "tokens generated", labels=["model"])
        # One sample per model label (a duplicate label set is invalid exposition): engines of the same version that
        # are still alive (one replaced in the model cache keeps running until its requests end) are summed; the
        # time to first token is their mean.
        by_name: dict[str, list[dict]] = {}
        for e in list(_ENGINES):
            by_name.setdefault(e.name, []).append(e.stats())
        for name, stats in by_name.items():
            for k, fam in fams.items():
                vals = [float(st[k]) for st in stats]
                fam.add_metric([name], sum(vals) / len(vals) if k == "mean_ttft_s" else sum(vals))
        yield from fams.values()


try:
    REGISTRY.register(_EngineCollector())
except ValueError:  # already registered (module reloaded)
    pass


def build_loaded(config_: GenerationConfig):
    def build(tensors: dict, config: dict, row: dict) -> LoadedLM:
        from services.common import hf
        from services.generation.engine import Engine

        hf.check_version_config(config)
        model, tokenizer = hf.load_model(tensors, config)
        name = f"{row['name']}:{row['version']}"
        engine = Engine(model, tokenizer, max_running=config_.max_running, max_queued=config_.max_queued,
                        retry_after_s=config_.retry_after_s, name=name)
        _ENGINES.add(engine)
        info = pb.ModelInfo(name=row["name"], version=int(row["version"] or 0), model_version_id=str(row["id"]),
                            model_type=str(config.get("model_type", "")), context_length=engine.max_context)
        return LoadedLM(engine, tokenizer, info)
    return build


def build_nli(tensors: dict, config: dict, row: dict):
    from services.generation import nli

    loaded = nli.load(tensors, config, name=f"{row['name']}:{row['version']}")
    loaded.info = pb.ModelInfo(name=row["name"], version=int(row["version"] or 0), model_version_id=str(row["id"]),
                               model_type=str(config.get("model_type", "")))
    return loaded


def uncertainty_options(request, cfg: GenerationConfig):
    """(services.generation.uncertainty.Options, question) of a Generate request with uncertainty set."""
    from services.generation.uncertainty import Options

    u, s = request.uncertainty, request.sampling
    f = "uncertainty."
    method = convert.enum_of(UNCERTAINTY_METHODS, u.method, f + "method")
    n = u.num_generations if u.HasField("num_generations") else 5
    if not 1 <= n <= 20:
        raise InvalidArgument(f + "num_generations", "must be in 1..20")
    beams = u.num_beams if u.HasField("num_beams") else 5
    if not 1 <= beams <= 8:
        raise InvalidArgument(f + "num_beams", "must be in 1..8")
    if method in ("sdlg", "multinomial") and not u.nli_model.name:
        raise InvalidArgument(f + "nli_model", f"{method} clusters answers with an NLI model: name a registered one "
                              "(StartNLITrainingJob or StartImportNLIModelJob)")
    if len(u.question) > 2000:
        raise InvalidArgument(f + "question", "at most 2000 characters")
    if request.HasField("kv_compression"):
        raise InvalidArgument("kv_compression", "not available together with uncertainty")
    sampling = sampling_of(s, cfg)  # validates every sampling field
    if s.HasField("max_new_tokens") and sampling.max_new_tokens > 256:
        raise InvalidArgument("sampling.max_new_tokens", "must be <= 256 with uncertainty")
    temp = sampling.temperature if s.HasField("temperature") else 1.0
    if temp <= 0 and method != "sdlg":
        raise InvalidArgument("sampling.temperature", f"{method} samples: must be > 0")
    question = u.question or prompt_question(request.prompt)
    opts = Options(method=method, n=n, num_beams=beams, max_new_tokens=min(sampling.max_new_tokens, 256)
                   if s.HasField("max_new_tokens") else 32, temperature=temp if temp > 0 else 1.0,
                   seed=sampling.seed or 0, stop=tuple(sampling.stop) or ("\n",), top_logprobs=sampling.logprobs)
    return opts, question


ANSWER_CUE = re.compile(r"(a|answer)\s*:", re.IGNORECASE)


def prompt_question(prompt: str) -> str:
    """The question the NLI model reads with each answer when a request names none: the prompt's last line that is
    not a bare answer cue ("A:", "Answer:"), so a few-shot "Q: ...\nA:" prompt gives its question."""
    lines = [ln.strip() for ln in prompt.splitlines() if ln.strip()]
    while lines and ANSWER_CUE.fullmatch(lines[-1]):
        lines.pop()
    return lines[-1] if lines else ""


def uncertainty_message(e, nli_info) -> pb.UncertaintyResult:
    masses = e.cluster_mass
    res = pb.UncertaintyResult(method=UNCERTAINTY_ENUM[e.method], answer=e.answer, entropy=e.score,
                               predictive_entropy=e.predictive_entropy, lexical_similarity=e.lexical_similarity,
                               seconds_generate=e.seconds_generate, seconds_cluster=e.seconds_cluster)
    if e.semantic_entropy is not None:
        res.semantic_entropy = e.semantic_entropy
    if nli_info is not None:
        res.nli_model.CopyFrom(nli_info)
    for k, members in enumerate(e.clusters):
        res.clusters.add(members=members, mass=masses[k] if masses else 0.0,
                         log_mass=e.cluster_log_mass[k] if e.cluster_log_mass else 0.0)
    where = {i: k for k, members in enumerate(e.clusters) for i in members}
    for i, g in enumerate(e.generations):
        res.generations.add(text=g.text, log_likelihood=g.log_likelihood, num_tokens=g.n_tokens, weight=g.weight,
                            origin=g.origin, word_index=g.word_index, substituted_token=g.token_text,
                            token_probability=g.token_probability, cluster=where.get(i, i))
    return res


def _finite(value: float, field: str) -> float:
    if not math.isfinite(value):
        raise InvalidArgument(field, "must be a finite number")
    return value


def sampling_of(s: pb.SamplingParams, cfg: GenerationConfig):
    from services.generation.engine import SamplingParams

    f = "sampling."
    max_new = s.max_new_tokens if s.HasField("max_new_tokens") else 64
    if max_new <= 0:
        raise InvalidArgument(f + "max_new_tokens", "must be >= 1")
    if max_new > cfg.max_new_tokens:
        raise InvalidArgument(f + "max_new_tokens", f"must be <= {cfg.max_new_tokens}")
    temp = _finite(s.temperature, f + "temperature") if s.HasField("temperature") else 0.0
    if temp < 0:
        raise InvalidArgument(f + "temperature", "must be >= 0 (0 is greedy)")
    if temp > 100:
        raise InvalidArgument(f + "temperature", "must be <= 100")
    top_k = s.top_k if s.HasField("top_k") else 0
    if top_k < 0:
        raise InvalidArgument(f + "top_k", "must be >= 0 (0 is off)")
    top_p = _finite(s.top_p, f + "top_p") if s.HasField("top_p") else 1.0
    if not 0 < top_p <= 1:
        raise InvalidArgument(f + "top_p", "must be in (0, 1]")
    if len(s.stop) > cfg.max_stop:
        raise InvalidArgument(f + "stop", f"at most {cfg.max_stop} stop strings")
    for i, x in enumerate(s.stop):
        if not x or len(x) > 256:
            raise InvalidArgument(f"{f}stop[{i}]", "1..256 characters")
    if not 0 <= s.top_logprobs <= cfg.max_top_logprobs:
        raise InvalidArgument(f + "top_logprobs", f"must be in 0..{cfg.max_top_logprobs}")
    seed = s.seed if s.HasField("seed") else None
    if seed is not None and seed < 0:
        raise InvalidArgument(f + "seed", "must be >= 0")
    return SamplingParams(max_new_tokens=max_new, temperature=temp, top_k=top_k, top_p=top_p, seed=seed,
                          stop=tuple(s.stop), logprobs=s.top_logprobs, ignore_eos=s.ignore_eos)


def policy_of(k: pb.KvCompression, has: bool):
    from services.generation.kvpolicy import CachePolicy

    f = "kv_compression."
    if not has:
        return CachePolicy()
    policy = convert.enum_of(POLICIES, k.policy, f + "policy")
    alpha = _finite(k.retention, f + "retention") if k.HasField("retention") else 1.0
    if not 0 < alpha <= 1:
        raise InvalidArgument(f + "retention", "must be in (0, 1]")
    if alpha < 0.01:
        raise InvalidArgument(f + "retention", "must be >= 0.01 (the smallest layer budget)")
    window = k.window if k.HasField("window") else 8
    if not 0 <= window <= 1_000_000:
        raise InvalidArgument(f + "window", "must be >= 0")
    tau = k.observation_window if k.HasField("observation_window") else 16
    if not 1 <= tau <= 1_000_000:
        raise InvalidArgument(f + "observation_window", "must be >= 1")
    p = _finite(k.threshold, f + "threshold") if k.HasField("threshold") else 0.01
    if not 0 < p < 1:
        raise InvalidArgument(f + "threshold", "must be in (0, 1)")
    sinks = k.sinks if k.HasField("sinks") else 4
    if not 0 <= sinks <= 1_000_000:
        raise InvalidArgument(f + "sinks", "must be >= 0")
    if policy == "none" and (k.HasField("retention") and alpha < 1):
        raise InvalidArgument(f + "policy", "retention < 1 needs a compression policy")
    return CachePolicy(policy, alpha, window, tau, p, sinks)


def token_message(e) -> pb.Token:
    return pb.Token(token_id=e.token_id, text=e.text, logprob=e.logprob,
                    top_logprobs=[pb.TokenLogprob(token_id=i, text=t, logprob=lp) for i, t, lp in e.top_logprobs])


def usage_message(fin) -> pb.Usage:
    return pb.Usage(prompt_tokens=fin.prompt_tokens, completion_tokens=fin.completion_tokens,
                    time_to_first_token_s=fin.time_to_first_token_s)


def cache_message(fin, policy) -> pb.CacheStats:
    return pb.CacheStats(policy=POLICY_ENUM[policy.policy], kept_bytes=fin.cache_bytes, full_bytes=fin.full_cache_bytes,
                         prompt_kept_fraction=fin.kept_fraction, layer_budgets=fin.budgets)


def train_params(request: pb.StartLanguageModelTrainingJobRequest, default_name: str) -> dict[str, Any]:
    params: dict[str, Any] = {f: getattr(request.params, f) for f in TRAIN_FIELDS if request.params.HasField(f)}
    params["model_name"] = request.model_name or default_name
    if request.corpus_artifact_id:
        params["corpus_artifact_id"] = parse_uuid(request.corpus_artifact_id, "corpus_artifact_id")
    paths = {f: f"params.{f}" for f in TRAIN_FIELDS}
    paths.update(model_name="model_name", corpus_artifact_id="corpus_artifact_id")
    parse_params(TrainParams, params, prefix="params.", field_paths=paths)
    return params


class _Mailbox:
    """Engine events on their way to one event loop. The engine thread appends (queue, event) pairs; the loop is
    woken (one self-pipe write, one callback that hands every buffered event to its request's queue) when the engine
    flushes after a batch of events (Engine.add_flusher: after its admissions and after each decode step), so a step
    that makes B tokens costs the loop one wake-up instead of B. Each wake-up also hands the GIL to the loop thread
    in the middle of the engine's step: once per token it was most of the engine thread's time through gRPC (py-spy
    on `praxon serve`, benchmarks/generation/RESULTS.md). An engine without add_flusher is woken for at every event.
    Each request's events keep their order (one producer, FIFO)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = weakref.ref(loop)  # weak: the mailbox is the value of a weak-keyed map on the loop
        self.items: deque = deque()
        self.lock = threading.Lock()
        self.pending = False

    def post(self, events: asyncio.Queue, e, wake: bool = True) -> None:
        self.items.append((events, e))
        if wake:
            self.flush()

    def flush(self) -> None:
        if not self.items:
            return
        with self.lock:
            if self.pending:
                return
            self.pending = True
        loop = self.loop()
        try:
            if loop is not None:
                loop.call_soon_threadsafe(self.drain)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    def drain(self) -> None:
        with self.lock:
            self.pending = False
        while self.items:
            events, e = self.items.popleft()
            events.put_nowait(e)


_MAILBOXES: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Mailbox]" = weakref.WeakKeyDictionary()
_DEADLINE = object()  # put in a request's queue when its deadline passes


def submit(engine, ids, sampling, policy):
    """Submit one generation to an engine from the event loop: (request, asyncio.Queue of its events). Raises at
    once what the engine refuses (a full queue: QueueFull). The gRPC servicer and the OpenAI-compatible routes
    (services.generation.openai_api) both go through here, so they run the same engine the same way."""
    from services.generation.engine import Request

    loop = asyncio.get_running_loop()
    box = _MAILBOXES.get(loop)
    if box is None:
        box = _MAILBOXES[loop] = _Mailbox(loop)
    deferred = hasattr(engine, "add_flusher")
    if deferred:
        engine.add_flusher(box.flush)  # once per engine and loop
    events: asyncio.Queue = asyncio.Queue()
    req = Request(ids, sampling, policy, lambda e: box.post(events, e, wake=not deferred))
    engine.submit(req)
    return req, events


async def engine_events(req, events: asyncio.Queue, timeout_s: float | None = None):
    """The events of a submitted request up to its Finished (whose error, if any, is raised); the request is
    cancelled when the consumer stops early (a client gone, a deadline of timeout_s passed), which frees its cache.
    The deadline is one timer for the whole request (it puts a marker in the queue), not a timed wait per token."""
    from services.generation.engine import Finished

    loop = asyncio.get_running_loop()
    timer = loop.call_later(max(timeout_s, 0.0), events.put_nowait, _DEADLINE) if timeout_s is not None else None
    try:
        while True:
            e = await events.get()
            if e is _DEADLINE:
                req.cancel()
                raise asyncio.CancelledError()
            yield e
            if isinstance(e, Finished):
                if e.error is not None:
                    raise e.error
                return
    finally:
        if timer is not None:
            timer.cancel()
        req.cancel()  # no-op when finished; frees the sequence when the client left mid-generation


class GenerationServicer(generation_pb2_grpc.GenerationServiceServicer):
    def __init__(self, app: AppContext, config: GenerationConfig | None = None):
        self.app = app
        self.config = config or GenerationConfig()
        self.models = ModelCache(app.registry, build_loaded(self.config), self.config, what="language model")
        self.remotes: dict[str, LoadedLM] = {}  # remote backends by model name (settings remote_models)
        self.nli_models = ModelCache(app.registry, build_nli, self.config, what="NLI model")

    async def close(self) -> None:
        await self.models.close()
        await self.nli_models.close()
        for r in self.remotes.values():
            await r.engine.close()

    # -- jobs
    async def StartLanguageModelTrainingJob(self, request, context):
        tenant = current_tenant()
        params = train_params(request, self.config.default_model)

        def work():
            if "corpus_artifact_id" in params:
                self.app.registry.get_artifact(tenant, params["corpus_artifact_id"], "corpus_artifact_id")
            return self.app.jobs.submit(tenant, TRAIN_KIND, params, request.idempotency_key)
        return pb.StartLanguageModelTrainingJobResponse(job=convert.job(await asyncio.to_thread(work)))

    async def _start_import(self, request, params_model, kind: str) -> dict:
        """An import job (a language model, an NLI checkpoint) from an uploaded archive or a local path under the
        import roots: checked here, so bad input is INVALID_ARGUMENT naming the field, before the job exists."""
        tenant = current_tenant()
        source = request.WhichOneof("source")
        if source is None:
            raise InvalidArgument("artifact_id", "give an uploaded archive artifact_id or a path")
        params: dict[str, Any] = {"model_name": request.model_name}
        if source == "path":
            if not request.path:
                raise InvalidArgument("path", "must not be empty")
            params["path"] = request.path
        else:
            params["artifact_id"] = parse_uuid(request.artifact_id, "artifact_id")
        parse_params(params_model, params, field_paths={"model_name": "model_name", "path": "path",
                                                        "artifact_id": "artifact_id"})
        if source == "path":
            from pathlib import Path

            from services.generation.jobs import check_local_path
            check_local_path(request.path, [Path(r).resolve() for r in self.config.import_roots], "path")

        def work():
            if "artifact_id" in params:
                self.app.registry.get_artifact(tenant, params["artifact_id"], "artifact_id")
            return self.app.jobs.submit(tenant, kind, params, request.idempotency_key)
        return await asyncio.to_thread(work)

    async def StartImportLanguageModelJob(self, request, context):
        job = await self._start_import(request, ImportParams, IMPORT_KIND)
        return pb.StartImportLanguageModelJobResponse(job=convert.job(job))

    async def StartNLITrainingJob(self, request, context):
        from services.generation.params import NLITrainParams

        tenant = current_tenant()
        params: dict[str, Any] = {f: getattr(request.params, f) for f in NLI_TRAIN_FIELDS
                                  if request.params.HasField(f)}
        params["model_name"] = request.model_name or "nli-minilm"
        paths = {f: f"params.{f}" for f in NLI_TRAIN_FIELDS}
        paths["model_name"] = "model_name"
        parse_params(NLITrainParams, params, prefix="params.", field_paths=paths)
        job = await asyncio.to_thread(self.app.jobs.submit, tenant, NLI_TRAIN_KIND, params, request.idempotency_key)
        return pb.StartNLITrainingJobResponse(job=convert.job(job))

    async def StartImportNLIModelJob(self, request, context):
        from services.generation.params import NLIImportParams

        job = await self._start_import(request, NLIImportParams, NLI_IMPORT_KIND)
        return pb.StartImportNLIModelJobResponse(job=convert.job(job))

    # -- serving
    async def _nli(self, ref):
        try:
            return await self.nli_models.get(ref_key(current_tenant(), ref, ""), field="uncertainty.nli_model")
        except FailedPrecondition as exc:
            if exc.reason == "MODEL_NOT_REGISTERED":
                raise NotFound(exc.message, reason="MODEL_NOT_FOUND", metadata=exc.metadata) from None
            raise

    async def _uncertain(self, request, on_answer=None, stop: threading.Event | None = None):
        """The answer (beam search) of a Generate or GenerateStream request with uncertainty set, with its semantic
        clusters and entropy (services.generation.uncertainty), computed in a worker thread: on the served model's
        weights, or for a remote model through its OpenAI-compatible server (RemoteLM: what that approximates is
        said there). on_answer(tokens, loaded model) is called (from the thread) once the answer is known; with
        `stop` set a remote estimate makes no more requests. Returns (estimate, loaded model, NLI model or None,
        prompt tokens)."""
        from services.generation.uncertainty import RemoteLM, estimate

        if not request.prompt:
            raise InvalidArgument("prompt", "must not be empty")
        if len(request.prompt) > self.config.max_prompt_chars:
            raise InvalidArgument("prompt", f"at most {self.config.max_prompt_chars} characters")
        opts, question = uncertainty_options(request, self.config)
        loaded = await self._model(request.model)
        nli = await self._nli(request.uncertainty.nli_model) if request.uncertainty.nli_model.name else None
        answered = (lambda tokens: on_answer(tokens, loaded)) if on_answer is not None else None
        if loaded.tokenizer is None:  # remote: the prompt goes as text, the upstream checks its length
            lm = RemoteLM(loaded.engine.complete, request.prompt, opts,
                          cancelled=stop.is_set if stop is not None else None)
            e = await asyncio.to_thread(estimate, None, None, nli, request.prompt, question, opts, lm=lm,
                                        on_answer=answered)
            return e, loaded, nli, 0   # the API's usage is per request; the prompt's own count is the upstream's
        ids = await asyncio.to_thread(loaded.engine.encode, request.prompt)
        loaded.engine.check(ids, sampling_of(request.sampling, self.config), "prompt")
        e = await asyncio.to_thread(estimate, loaded.engine.model, loaded.tokenizer, nli, request.prompt, question,
                                    opts, prompt_ids=ids, on_answer=answered)
        return e, loaded, nli, len(ids)

    async def _generate_uncertain(self, request, context):
        stop = threading.Event()
        try:
            e, loaded, nli, prompt_tokens = await self._uncertain(request, stop=stop)
        finally:
            stop.set()  # a caller gone or past its deadline cancels this: a remote estimate stops asking the server
        return pb.GenerateResponse(text=e.answer, finish_reason=pb.FINISH_REASON_STOP, model=loaded.info,
                                   usage=pb.Usage(prompt_tokens=prompt_tokens,
                                                  completion_tokens=e.generations[0].n_tokens),
                                   uncertainty=uncertainty_message(e, nli.info if nli is not None else None))

    async def _stream_uncertain(self, request, context):
        """GenerateStream with uncertainty: the answer's tokens as soon as the beam search has found it (beams are
        reordered until the end, so not one by one as they are decoded), then one last message with the finish
        reason, usage and the UncertaintyResult once the alternatives are generated and clustered."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future = loop.create_future()

        def on_answer(tokens, loaded) -> None:
            loop.call_soon_threadsafe(lambda: answer.done() or answer.set_result((tokens, loaded)))
        stop = threading.Event()
        task = asyncio.ensure_future(self._uncertain(request, on_answer, stop))
        try:
            await asyncio.wait({task, answer}, return_when=asyncio.FIRST_COMPLETED)
            if answer.done():
                tokens, loaded = answer.result()
                remote = loaded.tokenizer is None  # a remote model's token ids are unknown (0), as in its streams
                for k, (token_id, text, logprob, alternatives) in enumerate(tokens):
                    token = pb.Token(token_id=0 if remote else token_id, text=text, logprob=logprob,
                                     top_logprobs=[pb.TokenLogprob(token_id=0 if remote else i, text=t, logprob=lp)
                                                   for i, t, lp in alternatives])
                    msg = pb.GenerateStreamResponse(token=token)
                    if k == 0:
                        msg.model.CopyFrom(loaded.info)
                    yield msg
            e, loaded, nli, prompt_tokens = await task
            yield pb.GenerateStreamResponse(finish_reason=pb.FINISH_REASON_STOP, model=loaded.info,
                                            usage=pb.Usage(prompt_tokens=prompt_tokens,
                                                           completion_tokens=e.generations[0].n_tokens),
                                            uncertainty=uncertainty_message(e, nli.info if nli is not None else None))
        finally:
            stop.set()
            if not task.done():
                task.cancel()

    async def _model(self, ref) -> LoadedLM:
        name = ref.name or self.config.default_model
        if name in self.config.remote_models:
            if ref.version or ref.alias:
                raise InvalidArgument("model.version" if ref.version else "model.alias",
                                      f"{name!r} is served by a remote backend, which has no versions or aliases")
            return self._remote(name)
        try:
            return await self.models.get(ref_key(current_tenant(), ref, self.config.default_model), field="model")
        except FailedPrecondition as exc:
            if exc.reason == "MODEL_NOT_REGISTERED":
                raise NotFound(exc.message, reason="MODEL_NOT_FOUND", metadata=exc.metadata) from None
            raise

    def _remote(self, name: str) -> LoadedLM:
        from services.generation.remote import RemoteBackend

        loaded = self.remotes.get(name)
        if loaded is None:
            backend = RemoteBackend(name, self.config.remote_models[name])
            loaded = self.remotes[name] = LoadedLM(backend, None, pb.ModelInfo(name=name, model_type="remote"))
        return loaded

    async def _prepare(self, request):
        if not request.prompt:
            raise InvalidArgument("prompt", "must not be empty")
        if len(request.prompt) > self.config.max_prompt_chars:
            raise InvalidArgument("prompt", f"at most {self.config.max_prompt_chars} characters")
        sampling = sampling_of(request.sampling, self.config)
        policy = policy_of(request.kv_compression, request.HasField("kv_compression"))
        loaded = await self._model(request.model)
        if loaded.tokenizer is None:  # a remote backend: the prompt goes as text, the upstream checks its length
            if policy.compresses:
                raise FailedPrecondition(f"KV-cache compression ({policy.policy}) is not available for "
                                         f"{loaded.info.name!r}: it is served by the {loaded.engine.describe()}, "
                                         "whose cache this service does not control",
                                         reason="COMPRESSION_UNSUPPORTED_BY_BACKEND",
                                         metadata={"backend": loaded.engine.cfg.base_url, "field": "kv_compression"})
            return loaded, request.prompt, sampling, policy
        ids = await asyncio.to_thread(loaded.engine.encode, request.prompt)
        loaded.engine.check(ids, sampling, "prompt")
        return loaded, ids, sampling, policy

    async def _run(self, loaded: LoadedLM, ids, sampling, policy, context):
        """Submit and yield engine events; cancels the request when the caller goes away or its deadline passes."""
        remaining = context.time_remaining() if context is not None else None
        if loaded.tokenizer is None:  # remote: `ids` is the prompt text; closing the stream cancels upstream
            stream = loaded.engine.events(ids, sampling)
            try:
                async with asyncio.timeout(remaining):
                    async for e in stream:
                        yield e
            except TimeoutError:
                raise asyncio.CancelledError() from None  # the deadline passed: as for the local engine
            finally:
                await stream.aclose()
            return
        req, events = submit(loaded.engine, ids, sampling, policy)
        try:
            async for e in engine_events(req, events, remaining):
                yield e
        finally:
            req.cancel()  # at once when the caller stops early (not when the inner generator is collected)

    async def Generate(self, request, context):
        from services.generation.engine import Finished

        if request.HasField("uncertainty"):
            return await self._generate_uncertain(request, context)
        loaded, ids, sampling, policy = await self._prepare(request)
        tokens = []
        async for e in self._run(loaded, ids, sampling, policy, context):
            if isinstance(e, Finished):
                return pb.GenerateResponse(text=e.text, tokens=tokens, finish_reason=FINISH.get(e.finish_reason, 0),
                                           usage=usage_message(e), cache=cache_message(e, policy), model=loaded.info)
            tokens.append(token_message(e))

    async def GenerateStream(self, request, context):
        from services.generation.engine import Finished

        if request.HasField("uncertainty"):
            async for msg in self._stream_uncertain(request, context):
                yield msg
            return
        loaded, ids, sampling, policy = await self._prepare(request)
        first = True
        async for e in self._run(loaded, ids, sampling, policy, context):
            if isinstance(e, Finished):
                yield pb.GenerateStreamResponse(finish_reason=FINISH.get(e.finish_reason, 0), usage=usage_message(e),
                                                cache=cache_message(e, policy), model=loaded.info)
                return
            msg = pb.GenerateStreamResponse(token=token_message(e))
            if first:
                msg.model.CopyFrom(loaded.info)
                first = False
            yield msg

    async def CountTokens(self, request, context):
        if len(request.text) > self.config.max_prompt_chars:
            raise InvalidArgument("text", f"at most {self.config.max_prompt_chars} characters")
        loaded = await self._model(request.model)
        if loaded.tokenizer is None:
            raise FailedPrecondition(f"CountTokens is not available for {loaded.info.name!r}: it is served by the "
                                     f"{loaded.engine.describe()}, whose tokenizer this service does not have",
                                     reason="UNSUPPORTED_BY_BACKEND", metadata={"backend": loaded.engine.cfg.base_url})
        ids = await asyncio.to_thread(loaded.engine.encode, request.text)
        return pb.CountTokensResponse(count=len(ids), token_ids=ids, model=loaded.info)


def register(server: grpc.aio.Server, app: AppContext) -> list[str]:
    servicer = GenerationServicer(app, service_settings(app.settings, "generation", GenerationConfig))
    app.extras["generation_servicer"] = servicer
    generation_pb2_grpc.add_GenerationServiceServicer_to_server(servicer, server)
    from services.generation import rag_api  # the RetrievalService (document index, RAG) shares the model cache
    return [pb.DESCRIPTOR.services_by_name["GenerationService"].full_name, rag_api.register(server, app, servicer)]
