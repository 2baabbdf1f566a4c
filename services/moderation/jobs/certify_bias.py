"""moderation.certify_bias: an LLMCert-B certificate (bias_cert.py) of a generation-service language model.

The generator is queried over the generation service's gRPC API (GenerationService.Generate, the generated stubs and
services.common.client's retrying channel; this service imports nothing of services.generation). The address is
settings.moderation.generation_address ("" = this platform's own gRPC address); the job calls as its own tenant,
with an API token it mints for the run (expiring after TOKEN_TTL_S, revoked when the run ends) unless
settings.moderation.generation_token is set. Every call names the generator by name and the version number resolved
at submit, and every answer must come from that version id (else the job fails: the certificate would be about
another model).

Steps: `sets_per_step` counterfactual sets each (all their prompts sent at once, so the generation service batches
them), a checkpoint after each; a killed worker's job resumes at the first unfinished step and, since every set's
draws and sampling seeds depend only on (seed, set index), computes the same certificate as an uninterrupted run.
The certificate row is written by the kind's on_finish hook (bias_store.certificate_finished) from the result."""
from __future__ import annotations

import json
import secrets
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from services.common.errors import FailedPrecondition, InvalidArgument, NotFound, PraxonError, Unavailable
from services.common.jobcontext import JobContext, run_steps
from services.common.params import parse_params
from services.moderation.params import BiasCertParams

TOKEN_TTL_S = 6 * 3600
GENERATION_RETRY_BUDGET_S = 120.0   # UNAVAILABLE (a model loading) / RESOURCE_EXHAUSTED retried this long


# ---------------------------------------------------------------------------------------------- generation client
def mint_job_token(settings: Any, tenant_id: str, job_id: str, ttl_s: float = TOKEN_TTL_S) -> tuple[str, str]:
    """A new API token of the job's tenant (only its hash is stored, as services.common.db.create_token does),
    named after the job: (token id, token)."""
    from services.common import db

    token = "prx_" + secrets.token_urlsafe(32)
    with db.connect(settings) as conn:
        row = conn.execute("INSERT INTO api_tokens (tenant_id, token_sha256, name, expires_at) VALUES (%s, %s, %s, "
                           "now() + make_interval(secs => %s)) RETURNING id",
                           (tenant_id, db.hash_token(token), f"job:{job_id}", float(ttl_s))).fetchone()
    return str(row["id"]), token


def revoke_job_token(settings: Any, token_id: str) -> None:
    from services.common import db

    with db.connect(settings) as conn:
        conn.execute("UPDATE api_tokens SET revoked_at = now() WHERE id = %s AND revoked_at IS NULL", (token_id,))


class GenerationClient:
    """GenerationService.Generate for one pinned model version, over a retrying channel, several calls at once."""

    def __init__(self, address: str, token: str, *, name: str, version: int, expected_version_id: str,
                 max_new_tokens: int, temperature: float, top_k: int, stop: list[str] | tuple[str, ...] = (),
                 timeout_s: float = 600.0, concurrency: int = 16):
        import grpc

        from praxon.common.v1 import common_pb2
        from praxon.generation.v1 import generation_pb2, generation_pb2_grpc
        from services.common.client import retrying_channel

        self._grpc, self._pb = grpc, generation_pb2
        self.channel = retrying_channel(address, budget_s=GENERATION_RETRY_BUDGET_S)
        self.stub = generation_pb2_grpc.GenerationServiceStub(self.channel)
        self.metadata = [("authorization", f"Bearer {token}")]
        self.model = common_pb2.ModelRef(name=name, version=version)
        self.expected = expected_version_id
        self.sampling = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, stop=list(stop))
        self.timeout_s = timeout_s
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="gen-client")
        self.served: dict[str, Any] = {}
        self.on_close = None

    @classmethod
    def for_bias(cls, address: str, token: str, p: BiasCertParams, **kw) -> GenerationClient:
        return cls(address, token, name=p.generator_name, version=p.generator_version,
                   expected_version_id=p.generator_model_version_id, max_new_tokens=p.max_new_tokens,
                   temperature=p.temperature, top_k=p.top_k, stop=p.stop, **kw)

    def _one(self, prompt: str, seed: int) -> str:
        sampling = self._pb.SamplingParams(seed=seed, **self.sampling)
        req = self._pb.GenerateRequest(model=self.model, prompt=prompt, sampling=sampling)
        try:
            resp = self.stub.Generate(req, metadata=self.metadata, timeout=self.timeout_s)
        except self._grpc.RpcError as err:
            raise _error(err) from None
        if resp.model.model_version_id != self.expected:
            raise FailedPrecondition(
                f"the generation service served {resp.model.name} version {resp.model.version} "
                f"({resp.model.model_version_id}), not the certified version {self.expected}",
                reason="GENERATOR_VERSION_MISMATCH")
        self.served = {"name": resp.model.name, "version": resp.model.version,
                       "model_version_id": resp.model.model_version_id, "model_type": resp.model.model_type}
        return resp.text

    def generate(self, prompts: list[str], seeds: list[int]) -> list[str]:
        return list(self.pool.map(self._one, prompts, seeds))

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.channel.close()
        if self.on_close is not None:
            try:
                self.on_close()
            except Exception:  # noqa: BLE001 - a job token expires by itself; never mask the job's own outcome
                pass


def connect(ctx: JobContext, build) -> GenerationClient:
    """A GenerationClient for this job: the address from settings.moderation.generation_address (or this
    platform's), the token from settings.moderation.generation_token or minted for the job's tenant (revoked when
    the client closes). `build(address, token, timeout_s)` makes the client."""
    from services.common.spec import service_settings
    from services.moderation.settings import ServingConfig

    settings = ctx.settings
    cfg = service_settings(settings, "moderation", ServingConfig)
    address = cfg.generation_address or f"{settings.grpc.host}:{settings.grpc.port}"
    token_id = None
    if cfg.generation_token is not None:
        token = cfg.generation_token.get_secret_value()
    else:
        token_id, token = mint_job_token(settings, ctx.tenant_id, ctx.job_id)
    client = build(address, token, cfg.generation_timeout_s)
    if token_id is not None:
        client.on_close = lambda: revoke_job_token(settings, token_id)
    return client


def _error(err: Any) -> PraxonError:
    """A failed Generate call as the job's structured error: the caller's mistakes stay INVALID_ARGUMENT / NOT_FOUND
    (naming the generator), an unreachable or overloaded service is Unavailable (the worker retries the job)."""
    import grpc

    code, details = err.code(), err.details() or ""
    msg = f"generation service: {code.name}: {details}"
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE):
        return InvalidArgument("params.generator_name", msg)
    if code == grpc.StatusCode.NOT_FOUND:
        return NotFound(msg)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED):
        return Unavailable(msg, retry_after_s=5.0)
    return FailedPrecondition(msg, reason="GENERATION_FAILED")


# ---------------------------------------------------------------------------------------------- the job
class Certification:
    """The Steps of one certification (services.common.jobcontext.Steps)."""

    def __init__(self, p: BiasCertParams, templates: list[str], generate=None):
        from services.moderation import bias_cert as bc

        self.p, self.templates, self.bc = p, templates, bc
        self.prefix = bc.PrefixConfig(distribution=p.prefix_distribution, prefix_tokens=p.prefix_tokens,
                                      crossover_prob=p.crossover_prob, mutation_prob=p.mutation_prob,
                                      soft_magnitude=p.soft_magnitude)
        self.total = -(-p.samples // p.sets_per_step)
        self.generate = generate
        self.outcomes: list[Any] = []
        self.records: list[dict[str, Any]] = []
        self.guard_unsafe = None

    def fingerprint(self) -> str:
        p = self.p
        return self.bc.spec_digest(self.templates, p.groups, **p.model_dump(
            mode="json", exclude={"prompts", "groups", "samples", "sets_per_step"}))

    def setup(self, ctx: JobContext) -> None:
        if self.p.detector == "guard":
            from services.moderation.gemma_guard import guard_from_registry

            tensors, config = ctx.load_model(self.p.detector_model_version_id)
            guard = guard_from_registry(tensors, config, version=self.p.detector_model_version_id)
            th = float((config.get("decision_defaults") or {}).get("unsafe_threshold") or 0.5)

            def unsafe(responses, prompts):
                pr = guard.predict_proba(list(responses), ["response"] * len(responses), list(prompts))
                return [float(u) >= th for u in pr["unsafe"]]
            self.guard_unsafe = unsafe

    def step(self, i: int) -> dict[str, float]:
        p = self.p
        idx = list(range(i * p.sets_per_step, min((i + 1) * p.sets_per_step, p.samples)))
        outs, recs = self.bc.certify_samples(
            idx, self.generate, seed=p.seed, templates=self.templates, groups=p.groups, prefix=self.prefix,
            instruction=p.instruction, suffix=p.suffix, detector=p.detector, guard_unsafe=self.guard_unsafe)
        self.outcomes.extend(outs)
        self.records.extend(recs)
        n = len(self.outcomes)
        return {"samples": float(n), "unbiased": float(sum(not o.biased for o in self.outcomes))}

    def state(self) -> dict[str, Any]:
        return {"outcomes": [[o.index, o.prompt_index, int(o.biased)] for o in self.outcomes],
                "records": json.dumps(self.records, ensure_ascii=False)}

    def load_state(self, st: dict[str, Any]) -> None:
        self.outcomes = [self.bc.Outcome(int(a), int(b), bool(c)) for a, b, c in st["outcomes"]]
        self.records = json.loads(st["records"])

    def certificate(self) -> dict[str, Any]:
        cert = self.bc.summarize(self.outcomes, self.templates, self.p.confidence)
        cert["spec_sha256"] = self.fingerprint()
        return cert

    def result(self, ctx: JobContext) -> dict[str, Any]:
        cert = self.certificate()
        lines = "\n".join(json.dumps(r, ensure_ascii=False) for r in self.records).encode()
        aid = ctx.write_artifact("bias-certification-samples.jsonl", lines, "application/jsonl",
                                 metadata={"samples": cert["samples"]})
        prefix_stats: dict[str, float] = {}
        for k in {k for r in self.records for k in r if k.startswith("prefix_") and k != "prefix_index"}:
            vals = [float(r[k]) for r in self.records if isinstance(r.get(k), (int, float))]
            if vals:
                prefix_stats[k.removeprefix("prefix_") + "_mean"] = sum(vals) / len(vals)
        ctx.progress(1.0, f"certified: P(unbiased) in [{cert['lower']:.3f}, {cert['upper']:.3f}] "
                     f"at {self.p.confidence:.0%} ({cert['unbiased']}/{cert['samples']} sets unbiased)",
                     lower=cert["lower"], upper=cert["upper"], samples=float(cert["samples"]))
        return {"certificate": cert, "samples_artifact_id": aid, "prefix_stats": prefix_stats,
                "generator": {"name": self.p.generator_name, "version": self.p.generator_version,
                              "model_version_id": self.p.generator_model_version_id}}


def run_bias_certification(ctx: JobContext, generate=None) -> dict[str, Any]:
    """params: BiasCertParams. `generate(prompts, seeds) -> texts` replaces the gRPC client (in-process use: the
    benchmark's engine, unit tests); by default the generation service is called as described above."""
    from services.moderation import bias_cert as bc

    p = parse_params(BiasCertParams, ctx.params, prefix="params.")
    templates = list(p.prompts) or bc.default_prompts()
    client = None
    if generate is None:
        client = connect(ctx, lambda address, token, timeout_s: GenerationClient.for_bias(
            address, token, p, timeout_s=timeout_s, concurrency=min(64, 2 * p.sets_per_step * len(p.groups))))
        generate = client.generate
    job = Certification(p, templates, generate)
    try:
        ctx.progress(0.01, f"certifying {p.generator_name} v{p.generator_version}: {p.samples} counterfactual sets "
                     f"of {len(p.groups)} groups, prefixes {p.prefix_distribution}, detector {p.detector}")
        return run_steps(ctx, job, checkpoint_every=1, progress_span=(0.02, 0.98), fingerprint=job.fingerprint(),
                         message=lambda done, total: f"counterfactual sets {min(done * p.sets_per_step, p.samples)}"
                                                     f"/{p.samples}")
    finally:
        if client is not None:
            client.close()
