"""Semantic uncertainty for a model behind an OpenAI-compatible server (services.generation.uncertainty.RemoteLM over
services.generation.remote), and GenerateStream with uncertainty. The upstream is praxon's own OpenAI routes over a
local Engine on loopback (as in test_remote.py), serving the same tiny Llama that is also registered locally, so the
remote estimate is checked against the local one:
- where the server's top-20 logprobs hold every SDLG candidate above the threshold and the token texts re-encode
  to themselves, SDLG over the API equals SDLG on the weights (ranking, alternatives, likelihoods, clusters, entropy);
- with more candidates than that, the remote candidates are exactly the local ones among the top 20 (the named
  approximation);
- the sampling baselines' samples and likelihoods are the upstream engine's own;
- through the real gRPC server: Generate and GenerateStream with uncertainty on the remote and the local model (the
  stream's tokens spell the answer, its last message carries the same UncertaintyResult as Generate's), bad input
  -> INVALID_ARGUMENT naming the field, a server that refuses 20 top logprobs -> FAILED_PRECONDITION; the CLI over
  the stream."""
from __future__ import annotations

import io
import math
import uuid
from types import SimpleNamespace

import grpc
import pytest
import torch

from praxon.common.v1 import common_pb2
from praxon.generation.v1 import generation_pb2 as pb
from praxon.generation.v1 import generation_pb2_grpc
from services.generation import uncertainty as U
from services.generation.engine import Engine, SamplingParams
from services.generation.remote import RemoteBackend
from services.generation.settings import GenerationConfig, RemoteModel
from tests import harness
from tests.generation.conftest import OpenAIServer, openai_service, tiny_llama
from tests.generation.test_nli import tiny_nli
from tests.harness import auth, rpc_error_details

# A seed, prompt and threshold where SDLG has fewer than 20 candidates at each word, no two of them spelled alike,
# and every generation's token texts re-encode to the same tokens (all checked below)
SEED, QUESTION, THRESHOLD = 17, "where does the river go ?", 0.0035
PROMPT = f"question : {QUESTION} answer :"


@pytest.fixture(scope="module")
def up(tokenizer):
    from services.generation import nli
    from services.generation.openai_api import OpenAIService

    torch.set_num_threads(1)
    model = tiny_llama(tokenizer, seed=SEED)
    engine = Engine(model, tokenizer, name="upstream").start()
    server = OpenAIServer(openai_service(engine, tokenizer, "upstream-lm"))
    loaded = SimpleNamespace(engine=engine, tokenizer=tokenizer)

    async def current():
        return loaded
    # a server that allows 5 top logprobs (OpenAI's own cap), fewer than the estimate asks for
    stingy = OpenAIServer(OpenAIService(current, ["upstream-lm"], GenerationConfig(max_top_logprobs=5)))
    nli_model, nli_tok = tiny_nli(2)
    try:
        yield SimpleNamespace(
            model=model, tok=tokenizer, engine=engine, server=server, stingy=stingy,
            base_url=f"http://127.0.0.1:{server.port}/v1", stingy_url=f"http://127.0.0.1:{stingy.port}/v1",
            nli=nli.NLIModel(nli_model, nli_tok, {k: i for i, k in enumerate(nli.LABELS)}),
            nli_parts=nli.registry_parts(nli_model, nli_tok))
    finally:
        stingy.stop()
        server.stop()
        engine.stop()


def _backend(up) -> RemoteBackend:
    return RemoteBackend("big", RemoteModel(base_url=up.base_url, model="upstream-lm"))


def _ranking(lm, up, opts, answer):
    """SDLG's ranked candidates of an answer as (word, token text, importance, attribution, substitution), the
    candidates themselves, and the answer's next-token distributions."""
    probs = lm.distributions(answer.ids)
    ranked = U.rank_substitutions(lm, up.nli, QUESTION, answer.ids, probs, opts)
    return [(c["word"], lm.tok.decode([c["token"]]), c["importance"], c["attribution"], c["substitution"])
            for c in ranked], ranked, probs


def test_remote_sdlg_equals_the_local_one_when_the_top_logprobs_hold_every_candidate(up):
    opts = U.Options(method="sdlg", n=3, max_new_tokens=5, num_beams=3, stop=(), token_prob_threshold=THRESHOLD)
    prompt_ids = up.engine.encode(PROMPT)
    local_lm = U.LM(up.model, up.tok, opts, prompt_ids)
    local = U.estimate(up.model, up.tok, up.nli, PROMPT, QUESTION, opts, lm=local_lm)
    backend = _backend(up)
    remote_lm = U.RemoteLM(backend.complete, PROMPT, opts)
    remote = U.estimate(None, None, up.nli, PROMPT, QUESTION, opts, lm=remote_lm)
    # the conditions under which the two must agree: every candidate is among the top 20 at its word ...
    ranked_local, _, probs = _ranking(local_lm, up, opts, local.generations[0])
    first_tokens = U.lm_word_tokens(local_lm, local.generations[0].ids)[1]
    assert len(first_tokens) > 1 and max(int((probs[p] > THRESHOLD).sum()) for p in first_tokens) < 20
    assert len({r[:2] for r in ranked_local}) == len(ranked_local) > 10
    # ... and every generation's text re-encodes to its own tokens (the prefixes travel as text)
    for g in local.generations:
        assert up.engine.encode(PROMPT + up.tok.decode(g.ids)) == prompt_ids + g.ids, g.text
    assert len(local.generations) == 4 and len(set(local.cluster_ids)) > 1  # alternatives, several clusters
    ranked_remote, _, _ = _ranking(remote_lm, up, opts, remote.generations[0])
    # the same candidates with the same three scores (so the same ranking, up to the order of ties, which follows
    # the vocabulary's order locally and the server's top-logprobs order remotely)
    remote_scores, local_scores = ({r[:2]: r[2:] for r in ranked} for ranked in (ranked_remote, ranked_local))
    assert remote_scores.keys() == local_scores.keys()
    assert [x for k in sorted(local_scores) for x in remote_scores[k]] == pytest.approx(
        [x for k in sorted(local_scores) for x in local_scores[k]], rel=1e-3, abs=1e-7)
    assert [g.text for g in remote.generations] == [g.text for g in local.generations]
    assert [g.origin for g in remote.generations] == [g.origin for g in local.generations]
    assert [g.log_likelihood for g in remote.generations] == pytest.approx(
        [g.log_likelihood for g in local.generations], abs=1e-4)
    assert [g.weight for g in remote.generations] == pytest.approx([g.weight for g in local.generations], abs=1e-5)
    assert remote.cluster_ids == local.cluster_ids
    assert remote.score == pytest.approx(local.score, abs=1e-4)
    # the initial answer with 5 beams (10 candidates a step, within the 20 asked for) is the local one too
    five = U.Options(num_beams=5, max_new_tokens=5, stop=())
    ids, ll = U.LM(up.model, up.tok, five, prompt_ids).beam()
    five_lm = U.RemoteLM(backend.complete, PROMPT, five)
    rids, rll = five_lm.beam()
    assert five_lm.tok.decode(rids) == up.tok.decode(ids) and rll == pytest.approx(ll, abs=1e-4)
    assert five_lm.requests <= 5 * 5  # one request a live beam and step


def test_remote_candidates_are_the_local_ones_among_the_top_20(up):
    """With the default threshold (0.001) the random tiny model has hundreds of candidates a position; the remote
    estimate sees those among the 20 most likely (RemoteLM's named approximation), with the same importance."""
    opts = U.Options(method="sdlg", n=3, max_new_tokens=5, num_beams=3, stop=())
    local_lm = U.LM(up.model, up.tok, opts, up.engine.encode(PROMPT))
    answer, _ = U.initial_answer(local_lm)
    _, local, probs = _ranking(local_lm, up, opts, answer)
    remote_lm = U.RemoteLM(_backend(up).complete, PROMPT, opts)
    ranked_remote, _, _ = _ranking(remote_lm, up, opts, U.initial_answer(remote_lm)[0])
    top = [torch.topk(probs[pos], opts.remote_top_logprobs).indices.tolist() for pos in range(len(probs))]

    def unique_text(c):  # the API keys alternatives by text: tokens that decode alike (byte pieces) are one there
        texts = [up.tok.decode([v]) for v in top[c["pos"]]]
        return texts.count(up.tok.decode([c["token"]])) == 1
    want = {(c["word"], up.tok.decode([c["token"]])): c["importance"] for c in local
            if c["token"] in top[c["pos"]] and unique_text(c)}
    got = {(w, t): imp for w, t, imp, _, _ in ranked_remote if "\ufffd" not in t}
    want = {k: v for k, v in want.items() if "\ufffd" not in k[1]}
    assert len(local) > 3 * opts.remote_top_logprobs and len(got) >= 5
    assert got.keys() == want.keys()
    assert [got[k] for k in sorted(got)] == pytest.approx([want[k] for k in sorted(want)], abs=1e-5)


def test_remote_samples_are_the_upstream_engines(up):
    opts = U.Options(method="multinomial", n=3, max_new_tokens=6, stop=(), seed=11)
    lm = U.RemoteLM(_backend(up).complete, PROMPT, opts)
    samples = lm.sample(3)
    for i, (ids, ll) in enumerate(samples):
        events, fin = up.engine.generate(up.engine.encode(PROMPT), SamplingParams(
            max_new_tokens=6, temperature=1.0, seed=11 + i, logprobs=1))
        assert lm.text(ids) == fin.text.strip()
        assert ll == pytest.approx(sum(e.logprob for e in events), abs=1e-4)
    assert len({lm.text(ids) for ids, _ in samples}) > 1  # distinct seeds, distinct samples


# ------------------------------------------------------------------------------------ through the real server
@pytest.fixture(scope="module")
def env(settings, up):
    from services.common import hf
    from services.generation import nli

    private = settings.model_copy(deep=True)
    private.generation = GenerationConfig(remote_models={
        "big": RemoteModel(base_url=up.base_url, model="upstream-lm"),
        "stingy": RemoteModel(base_url=up.stingy_url, model="upstream-lm")})
    server = harness.PlatformServer(private, ["platform", "generation"])
    tenant, token = harness.token_for(private, f"unc-remote-{uuid.uuid4().hex[:6]}")
    tensors, config = hf.from_pretrained_objects(up.model, up.tok)
    harness.register_model(private, tenant, "lm-tiny", tensors, kind=hf.REGISTRY_KIND, config=config)
    harness.register_model(private, tenant, "nli-tiny", up.nli_parts[0], kind=nli.REGISTRY_KIND,
                           config=up.nli_parts[1])
    channel = grpc.insecure_channel(server.address)
    try:
        yield SimpleNamespace(stub=generation_pb2_grpc.GenerationServiceStub(channel), md=auth(token),
                              address=server.address, token=token)
    finally:
        channel.close()
        server.stop()


def _req(model="big", method=pb.UNCERTAINTY_METHOD_SDLG, cls=pb.GenerateRequest, nli="nli-tiny", **kw):
    u = pb.UncertaintyOptions(method=method, nli_model=common_pb2.ModelRef(name=nli) if nli else None,
                              num_generations=kw.pop("n", 3), num_beams=kw.pop("beams", 3), question=QUESTION)
    return cls(model=common_pb2.ModelRef(name=model), prompt=kw.pop("prompt", PROMPT),
               sampling=pb.SamplingParams(**{"max_new_tokens": 5, "seed": 1, **kw}), uncertainty=u)


def _check_result(u, n_max):
    assert u.generations[0].origin == "initial" and 1 <= len(u.generations) <= n_max
    assert sorted(i for c in u.clusters for i in c.members) == list(range(len(u.generations)))
    assert sum(c.mass for c in u.clusters) == pytest.approx(1.0)
    assert u.HasField("semantic_entropy") and math.isfinite(u.entropy) and u.nli_model.name == "nli-tiny"


@pytest.mark.parametrize("method", [pb.UNCERTAINTY_METHOD_SDLG, pb.UNCERTAINTY_METHOD_MULTINOMIAL])
def test_generate_with_uncertainty_on_a_remote_model(env, method):
    r = harness.call_retrying(env.stub.Generate, _req(method=method), env.md, timeout=120, call_timeout=110)
    local = harness.call_retrying(env.stub.Generate, _req("lm-tiny", method), env.md, timeout=120, call_timeout=110)
    u = r.uncertainty
    _check_result(u, 4)
    assert r.model.name == "big" and r.model.model_type == "remote" and u.answer == r.text
    assert u.answer == local.uncertainty.answer  # the same beam search, over the API and on the weights
    assert u.generations[0].log_likelihood == pytest.approx(local.uncertainty.generations[0].log_likelihood,
                                                            abs=1e-4)
    if method == pb.UNCERTAINTY_METHOD_SDLG:
        assert all(g.origin == "substitution" and g.token_probability > 0.001 for g in u.generations[1:])
        assert sum(g.weight for g in u.generations) == pytest.approx(1.0)
        assert u.entropy == pytest.approx(u.semantic_entropy)
    else:
        assert all(g.origin == "sample" and g.weight == 1.0 for g in u.generations[1:]) and len(u.generations) == 4


@pytest.mark.parametrize("model", ["big", "lm-tiny"])
def test_generate_stream_with_uncertainty_sends_the_answer_then_the_result(env, model):
    msgs = list(env.stub.GenerateStream(_req(model, cls=pb.GenerateStreamRequest, top_logprobs=3), metadata=env.md,
                                        timeout=120))
    whole = env.stub.Generate(_req(model), metadata=env.md, timeout=120)
    tokens, last = msgs[:-1], msgs[-1]
    assert tokens and all(m.HasField("token") and not m.HasField("uncertainty") for m in tokens)
    assert tokens[0].model.name == model and last.model.name == model
    assert not last.HasField("token") and last.finish_reason == pb.FINISH_REASON_STOP
    u = last.uncertainty
    _check_result(u, 4)
    assert "".join(m.token.text for m in tokens) == u.answer == whole.uncertainty.answer
    assert len(tokens) == u.generations[0].num_tokens == last.usage.completion_tokens
    assert sum(m.token.logprob for m in tokens) == pytest.approx(u.generations[0].log_likelihood, abs=1e-3)
    # deterministic (beam search, ranked substitutions): the same result as Generate's
    assert [g.text for g in u.generations] == [g.text for g in whole.uncertainty.generations]
    assert u.entropy == pytest.approx(whole.uncertainty.entropy, abs=1e-9)
    assert all(m.token.token_id == 0 for m in tokens) == (model == "big")  # the API gives no token ids
    for m in tokens:  # the 3 most likely tokens at each step, the beam's own choice at or below the best
        lps = [x.logprob for x in m.token.top_logprobs]
        assert len(lps) == 3 and lps == sorted(lps, reverse=True) and m.token.logprob <= lps[0] + 1e-6


def test_the_answer_is_handed_on_before_the_alternatives_are_generated(up):
    """estimate's on_answer (what GenerateStream sends first) comes after the initial beam search and before any
    other generation: the LM has been called once then; its tokens spell the answer."""
    opts = U.Options(method="sdlg", n=3, max_new_tokens=5, num_beams=3, stop=(), top_logprobs=2)
    lm = U.LM(up.model, up.tok, opts, up.engine.encode(PROMPT))
    seen = []
    e = U.estimate(up.model, up.tok, up.nli, PROMPT, QUESTION, opts, lm=lm,
                   on_answer=lambda tokens: seen.append((lm.calls, tokens)))
    (calls, tokens), = seen
    assert calls == 1 and lm.calls == len(e.generations) > 1
    assert "".join(t[1] for t in tokens) == e.answer and [t[0] for t in tokens] == e.generations[0].ids
    assert sum(t[2] for t in tokens) == pytest.approx(e.generations[0].log_likelihood, abs=1e-4)
    assert all(len(t[3]) == 2 for t in tokens)


def test_bad_stream_input_names_the_field_and_a_server_refusing_logprobs_is_a_precondition(env):
    def error(req):
        with pytest.raises(grpc.RpcError) as e:
            list(env.stub.GenerateStream(req, metadata=env.md, timeout=60))
        return rpc_error_details(e.value)
    cases = {
        "uncertainty.num_generations": _req(cls=pb.GenerateStreamRequest, n=0),
        "uncertainty.nli_model": _req(cls=pb.GenerateStreamRequest, nli=""),
        "uncertainty.num_beams": _req(cls=pb.GenerateStreamRequest, beams=9),
        "uncertainty.method": _req(cls=pb.GenerateStreamRequest, method=9),
        "prompt": _req(cls=pb.GenerateStreamRequest, prompt=""),
        "sampling.max_new_tokens": _req(cls=pb.GenerateStreamRequest, max_new_tokens=0),
        "sampling.temperature": _req(cls=pb.GenerateStreamRequest, method=pb.UNCERTAINTY_METHOD_MULTINOMIAL,
                                     temperature=0.0),
    }
    for field, req in cases.items():
        code, _, bad, _ = error(req)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == field, field
    req = _req(cls=pb.GenerateStreamRequest)
    req.kv_compression.CopyFrom(pb.KvCompression(policy=pb.CACHE_POLICY_H2O, retention=0.5))
    code, _, bad, _ = error(req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == "kv_compression"
    code, info, _, _ = error(_req("stingy", cls=pb.GenerateStreamRequest))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and info.reason == "REMOTE_REJECTED"
    assert info.metadata["field"] == "uncertainty"
    code, info, _, _ = error(_req("big", cls=pb.GenerateStreamRequest, nli="no-such-nli"))
    assert code == grpc.StatusCode.NOT_FOUND


def test_cli_streams_the_answer_then_prints_its_clusters(env):
    from services.common.client import resolve_target
    from services.generation import cli

    out = io.StringIO()
    req = pb.GenerateRequest(model=common_pb2.ModelRef(name="big"), prompt=PROMPT,
                             sampling=pb.SamplingParams(max_new_tokens=4))
    resp = cli.uncertain(resolve_target(env.address, env.token, None), req, "sdlg", "nli-tiny", generations=2,
                         out=out, timeout=120, stream=True)
    text = out.getvalue()
    assert text.startswith(f"answer: {resp.uncertainty.answer}\n") and resp.text == resp.uncertainty.answer
    assert "cluster 0: mass" in text and f"uncertainty {resp.uncertainty.entropy:.3f}" in text
