"""Semantic uncertainty (services.generation.uncertainty): the closed forms (semantic entropy of two clusters is
H(p); SDLG's importance weights), SDLG's ranking on a fixed example by hand and on a tiny LM + tiny NLI model against
an independent recomputation of its three scores, the repo's greedy clustering, the beam search against
transformers', and Generate with uncertainty through the real gRPC server with the NLI model trained by a
generation.nli_train job on a real worker (progress events, held-out accuracy in the registered metrics); bad
input -> INVALID_ARGUMENT naming the field, an unknown NLI model -> NOT_FOUND."""
from __future__ import annotations

import math
import uuid
from types import SimpleNamespace

import grpc
import pytest
import torch

from praxon.common.v1 import common_pb2
from praxon.generation.v1 import generation_pb2 as pb
from praxon.generation.v1 import generation_pb2_grpc
from praxon.models.v1 import models_pb2, models_pb2_grpc
from services.generation import uncertainty as U
from tests import harness
from tests.generation.conftest import tiny_llama
from tests.generation.test_nli import tiny_nli
from tests.harness import auth, job_row, rpc_error_details, wait_for


def H(p: float) -> float:
    return -p * math.log(p) - (1 - p) * math.log(1 - p)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.77])
def test_semantic_entropy_of_two_clusters_is_the_binary_entropy(p):
    # cluster 0: two answers of probability p/3 and 2p/3; cluster 1: one of probability 1 - p
    ll = [math.log(p / 3), math.log(1 - p), math.log(2 * p / 3)]
    se, agg = U.semantic_entropy(ll, [1.0, 1.0, 1.0], [0, 1, 0])
    assert se == pytest.approx(H(p), abs=1e-12)
    assert agg == pytest.approx([math.log(p), math.log(1 - p)], abs=1e-12)
    one, _ = U.semantic_entropy(ll, [1.0] * 3, [0, 0, 0])
    assert one == pytest.approx(0.0, abs=1e-12)  # one cluster holding all the mass: no uncertainty


def test_importance_weights_as_specified():
    w = U.sdlg_weights([0.2, 0.05, 0.5])
    assert w == pytest.approx([1 / 1.75, 0.2 / 1.75, 0.05 / 1.75, 0.5 / 1.75])
    assert sum(w) == pytest.approx(1.0)
    # log p~(y) = log p(y) + log w; cluster log-mass = logsumexp; SE = -sum softmax(lp) lp
    ll = [-0.5, -1.0, -2.0, -0.7]
    se, agg = U.semantic_entropy(ll, w, [0, 1, 1, 0])
    m0 = math.log(math.exp(-0.5) * w[0] + math.exp(-0.7) * w[3])
    m1 = math.log(math.exp(-1.0) * w[1] + math.exp(-2.0) * w[2])
    z = math.exp(m0) + math.exp(m1)
    assert agg == pytest.approx([m0, m1])
    assert se == pytest.approx(-(math.exp(m0) / z * m0 + math.exp(m1) / z * m1))


def test_ranking_on_a_fixed_example_by_hand():
    # (attribution, substitution, importance) of five candidates
    triples = [(0.9, 0.1, 0.30),   # ranks (1, 4, 2) -> 7/3
               (0.9, 0.8, 0.05),   # ranks (1, 1, 3) -> 5/3
               (0.2, 0.5, 0.30),   # ranks (2, 2, 2) -> 6/3 (ties keep list order)
               (0.2, 0.3, 0.50),   # ranks (2, 3, 1) -> 6/3
               (0.1, 0.8, 0.01)]   # ranks (3, 1, 4) -> 8/3
    assert U.dense_rank([t[0] for t in triples]) == [1, 1, 2, 2, 3]
    assert U.dense_rank([t[1] for t in triples]) == [4, 1, 2, 3, 1]
    assert U.dense_rank([t[2] for t in triples]) == [2, 3, 2, 1, 4]
    assert U.rank_triples(triples) == [1, 2, 3, 0, 4]
    assert U.rank_triples(triples, (0.0, 0.0, 1.0)) == [3, 0, 2, 1, 4]  # importance alone


def test_greedy_clusters_and_lexical_similarity_by_hand():
    eq = {(0, 2), (1, 3), (2, 3)}
    ids = U.cluster(["Paris", "Lyon", "paris, France", "Lyon city", "PARIS"], lambda i, j: (i, j) in eq)
    # the repo's greedy pass: 2 joins 0; 3 joins 1 (i = 1), then 0's cluster (i = 2 overrides); 4 equals 0's text
    assert ids == [0, 1, 0, 0, 0]
    assert U.rouge_l("the cat sat", "the cat sat") == 1.0
    assert U.rouge_l("the cat sat down", "a cat sat") == pytest.approx(2 * (2 / 4) * (2 / 3) / (2 / 4 + 2 / 3))
    assert U.lexical_similarity(["a b", "a b", "c"]) == pytest.approx((1 + 0 + 0) / 3)


@pytest.fixture(scope="module")
def small(tokenizer):
    from services.generation import nli

    model, tok = tiny_nli(2)
    return SimpleNamespace(lm=tiny_llama(tokenizer, seed=3), tok=tokenizer,
                           nli=nli.NLIModel(model, tok, {k: i for i, k in enumerate(nli.LABELS)}))


def test_sdlg_scores_equal_an_independent_recomputation(small):
    """rank_substitutions on a tiny LM and a tiny NLI model: every candidate's importance is the LM probability at
    the word's first token (above the threshold, not the original token), its attribution the norm of the mean
    |grad * emb| over the word's NLI tokens, its substitution cos(E[orig] - E[v], grad); the order is rank_triples'."""
    torch.manual_seed(0)
    opts = U.Options(n=3, max_new_tokens=6, token_prob_threshold=0.002, stop=())
    question = "where does the river go ?"
    answer_ids = small.tok("river goes north fast", add_special_tokens=False)["input_ids"]
    lm = U.LM(small.lm, small.tok, opts, small.tok(question)["input_ids"])
    probs = lm.distributions(answer_ids)
    ranked = U.rank_substitutions(lm, small.nli, question, answer_ids, probs, opts)
    assert ranked, "the tiny LM spreads its probability: there are candidates above the threshold"
    answer = lm.text(answer_ids)
    words = answer.split()
    premise = f"{question} {answer}"
    nt = small.nli.tokenizer
    enc = nt(premise, premise, return_offsets_mapping=True)
    ids = torch.tensor([enc["input_ids"]])
    e = small.nli.model.get_input_embeddings()(ids).detach().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(
        small.nli.model(inputs_embeds=e, token_type_ids=torch.tensor([enc["token_type_ids"]])).logits,
        torch.tensor([0]))
    (g,) = torch.autograd.grad(loss, e)
    g, e = g[0], e[0].detach()
    start = len(question) + 1
    seqs = enc.sequence_ids()
    emb = small.nli.model.get_input_embeddings().weight.detach()

    def E(tok_id):
        pieces = nt(small.tok.decode([tok_id]).strip(), add_special_tokens=False)["input_ids"]
        return emb[pieces].mean(0) if pieces else torch.zeros(emb.shape[1])  # no word pieces: the origin
    for c in ranked:
        w = c["word"]
        ws = start + answer.index(words[w])
        toks = [t for t, (a, b) in enumerate(enc["offset_mapping"])
                if seqs[t] == 0 and b > a and b > ws and a < ws + len(words[w])]
        assert c["attribution"] == pytest.approx(float((g[toks] * e[toks]).abs().mean(0).norm()), rel=1e-5)
        orig = answer_ids[c["pos"]]
        want = torch.nn.functional.cosine_similarity((E(orig) - E(c["token"]))[None], g[toks[0]][None])
        assert c["substitution"] == pytest.approx(float(want), abs=1e-5)
        assert c["importance"] == pytest.approx(float(probs[c["pos"], c["token"]]))
        assert c["importance"] > 0.002 and c["token"] != orig
        # pos is the first LM token of word w
        assert small.tok.decode(answer_ids[:c["pos"] + 1]).strip().split()[-1] == words[w][:len(
            small.tok.decode(answer_ids[:c["pos"] + 1]).strip().split()[-1])]
    order = U.rank_triples([(c["attribution"], c["substitution"], c["importance"]) for c in ranked])
    assert order == list(range(len(ranked)))


def test_beam_search_equals_transformers_and_likelihoods_are_the_models(small):
    opts = U.Options(num_beams=4, max_new_tokens=7, stop=())
    prompt = small.tok("question : where does the river go ? answer :")["input_ids"]
    lm = U.LM(small.lm, small.tok, opts, prompt)
    ids, ll = lm.beam()
    x = torch.tensor([prompt])
    want = small.lm.generate(x, attention_mask=torch.ones_like(x), num_beams=4, do_sample=False, max_new_tokens=7,
                             early_stopping=True, length_penalty=1.0, pad_token_id=small.tok.pad_token_id,
                             eos_token_id=small.tok.eos_token_id)[0, len(prompt):].tolist()
    want = [t for t in want if t != small.tok.pad_token_id]
    assert ids == want

    def loglik(gen):
        logits = small.lm(torch.tensor([prompt + gen])).logits[0, len(prompt) - 1:-1]
        return float(torch.log_softmax(logits, -1).gather(1, torch.tensor(gen)[:, None]).sum())
    assert ll == pytest.approx(loglik(ids), abs=1e-4)
    lm.opts = U.Options(seed=5, max_new_tokens=5, stop=())
    for gen, lp in lm.sample(3):
        assert lp == pytest.approx(loglik(gen), abs=1e-4)
    # a prefix continued: prefix log-likelihood passed in + the continuation's
    pre = ids[:2]
    lm.opts = opts
    cont, ll2 = lm.beam(pre, loglik(pre))
    assert cont[:2] == pre and ll2 == pytest.approx(loglik(cont), abs=1e-4)


def test_estimate_every_method_on_the_tiny_model(small):
    prompt, q = "question : where does the river go ? answer :", "where does the river go ?"
    for method in U.METHODS:
        e = U.estimate(small.lm, small.tok, small.nli, prompt, q, U.Options(method=method, n=3, max_new_tokens=5,
                                                                           stop=()))
        assert e.generations[0].origin == "initial" and len(e.generations) <= 4
        assert sorted(i for m in e.clusters for i in m) == list(range(len(e.generations)))
        assert sum(e.cluster_mass) == pytest.approx(1.0) and math.isfinite(e.score)
        if method == "sdlg":
            assert sum(g.weight for g in e.generations) == pytest.approx(1.0)
            assert all(g.origin == "substitution" and g.token_probability > 0.001 for g in e.generations[1:])
        else:
            assert all(g.weight == 1.0 and g.origin == "sample" for g in e.generations[1:])


# ------------------------------------------------------------------------------------ through the real server
QUEUES = "default,training"


@pytest.fixture(scope="module")
def env(settings, tmp_path_factory, tokenizer):
    from services.common import hf

    with harness.private_platform(settings) as private:
        tenant, token = harness.token_for(private, f"unc-{uuid.uuid4().hex[:6]}")
        server = harness.PlatformServer(private, ["platform", "generation"])
        worker = harness.Worker(private, tmp_path_factory.mktemp("unc-workers"), QUEUES)
        channel = grpc.insecure_channel(server.address)
        stub = generation_pb2_grpc.GenerationServiceStub(channel)
        md = auth(token)
        tensors, config = hf.from_pretrained_objects(tiny_llama(tokenizer, seed=4), tokenizer)
        harness.register_model(private, tenant, "lm-tiny", tensors, kind=hf.REGISTRY_KIND, config=config)
        job = stub.StartNLITrainingJob(pb.StartNLITrainingJobRequest(
            model_name="nli-tiny", params=pb.NLITrainingParams(steps=3, batch_size=4, train_pairs=24,
                                                               heldout_pairs=12, steps_per_checkpoint=2)),
            metadata=md).job
        row = wait_for(lambda: (r := job_row(private, job.id))["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")
                       and r, 300, interval=0.3, what="nli job")
        yield SimpleNamespace(stub=stub, md=md, settings=private, job=job, row=row, channel=channel, token=token,
                              address=server.address,
                              registry=models_pb2_grpc.ModelRegistryServiceStub(channel))
        worker.stop()
        channel.close()
        server.stop()


def test_nli_training_job_runs_on_a_worker_with_progress(env):
    from services.common import db

    assert env.row["state"] == "SUCCEEDED", (env.row["error_reason"], env.row["error_message"])
    with db.connect(env.settings) as conn:
        events = conn.execute("SELECT progress AS fraction, message FROM job_events WHERE job_id = %s ORDER BY seq",
                              (env.job.id,)).fetchall()
    msgs = [e["message"] for e in events]
    assert "step 1/3" in msgs and "step 3/3" in msgs
    fr = [e["fraction"] for e in events if e["fraction"] is not None]
    assert fr == sorted(fr) and fr[-1] >= 0.98
    v = env.registry.GetModelVersion(models_pb2.GetModelVersionRequest(model=common_pb2.ModelRef(name="nli-tiny")),
                                     metadata=env.md).version
    assert 0 <= v.metrics["heldout_accuracy"] <= 1 and v.metrics["heldout_pairs"] == 12


def _req(method=pb.UNCERTAINTY_METHOD_SDLG, nli="nli-tiny", **kw):
    u = pb.UncertaintyOptions(method=method, nli_model=common_pb2.ModelRef(name=nli) if nli else None,
                              num_generations=kw.pop("n", 3), question="where does the river go ?")
    for k, v in kw.pop("u", {}).items():
        setattr(u, k, v)
    return pb.GenerateRequest(model=common_pb2.ModelRef(name="lm-tiny"),
                              prompt=kw.pop("prompt", "question : where does the river go ? answer :"),
                              sampling=pb.SamplingParams(**{"max_new_tokens": 5, "seed": 1, **kw}), uncertainty=u)


@pytest.mark.parametrize("method", [pb.UNCERTAINTY_METHOD_SDLG, pb.UNCERTAINTY_METHOD_MULTINOMIAL,
                                    pb.UNCERTAINTY_METHOD_PREDICTIVE])
def test_generate_with_uncertainty_through_grpc(env, method):
    r = harness.call_retrying(env.stub.Generate, _req(method), env.md, timeout=120, call_timeout=110)
    u = r.uncertainty
    assert u.method == method and u.answer == r.text and r.model.name == "lm-tiny"
    assert u.nli_model.name == "nli-tiny" and 1 <= len(u.generations) <= 4
    assert u.generations[0].origin == "initial"
    members = sorted(i for c in u.clusters for i in c.members)
    assert members == list(range(len(u.generations)))
    assert sum(c.mass for c in u.clusters) == pytest.approx(1.0)
    assert all(list(u.clusters[g.cluster].members).count(i) == 1 for i, g in enumerate(u.generations))
    assert u.HasField("semantic_entropy") and math.isfinite(u.entropy)
    if method == pb.UNCERTAINTY_METHOD_SDLG:
        assert u.entropy == pytest.approx(u.semantic_entropy)
        assert sum(g.weight for g in u.generations) == pytest.approx(1.0)
    elif method == pb.UNCERTAINTY_METHOD_PREDICTIVE:
        assert u.entropy == pytest.approx(u.predictive_entropy)


def test_bad_uncertainty_input_names_the_field(env):
    cases = {
        "uncertainty.num_generations": _req(n=0),
        "uncertainty.nli_model": _req(nli=""),
        "uncertainty.method": _req(method=9),
        "uncertainty.num_beams": _req(u={"num_beams": 9}),
        "prompt": _req(prompt=""),
        "sampling.max_new_tokens": _req(max_new_tokens=0),
    }
    for field, req in cases.items():
        with pytest.raises(grpc.RpcError) as e:
            env.stub.Generate(req, metadata=env.md, timeout=30)
        code, _, bad, _ = rpc_error_details(e.value)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, field
        assert bad.field_violations[0].field == field
    with pytest.raises(grpc.RpcError) as e:
        env.stub.Generate(_req(nli="no-such-nli"), metadata=env.md, timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as e:  # a causal LM is not an NLI model
        env.stub.Generate(_req(nli="lm-tiny"), metadata=env.md, timeout=30)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as e:
        env.stub.StartNLITrainingJob(pb.StartNLITrainingJobRequest(params=pb.NLITrainingParams(steps=0)),
                                     metadata=env.md, timeout=30)
    code, _, bad, _ = rpc_error_details(e.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == "params.steps"


def test_cli_prints_the_answer_with_its_clusters_and_entropy(env):
    import io

    from services.common.client import resolve_target
    from services.generation import cli

    out = io.StringIO()
    req = pb.GenerateRequest(model=common_pb2.ModelRef(name="lm-tiny"), prompt="question : where does the river go ?",
                             sampling=pb.SamplingParams(max_new_tokens=4))
    resp = cli.uncertain(resolve_target(env.address, env.token, None), req, "multinomial", "nli-tiny",
                         generations=2, out=out, timeout=120)
    text = out.getvalue()
    assert f"answer: {resp.uncertainty.answer!r}" in text and "cluster 0: mass" in text
    assert f"uncertainty {resp.uncertainty.entropy:.3f}" in text


def test_an_uploaded_hugging_face_nli_checkpoint_is_imported_and_used(env, tmp_path):
    """StartImportNLIModelJob: a Hugging Face sequence-classification NLI directory (here a tiny random BERT with
    a DeBERTa-MNLI-style label map, upper case) uploaded as a .tar.gz -> a registered NLI model Generate uses."""
    from tests.generation.test_api import _dir_files, _tar, _upload

    model, tok = tiny_nli(7)
    model.config.id2label = {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}
    art = _upload(env.channel, env.token, "nli.tar.gz", _tar(_dir_files(model, tok, tmp_path)))
    job = env.stub.StartImportNLIModelJob(pb.StartImportNLIModelJobRequest(model_name="nli-imported",
                                                                           artifact_id=art), metadata=env.md).job
    row = wait_for(lambda: (r := job_row(env.settings, job.id))["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")
                   and r, 240, interval=0.3, what="nli import")
    assert row["state"] == "SUCCEEDED", (row["error_reason"], row["error_message"])
    assert row["result"]["labels"] == {"contradiction": 0, "neutral": 1, "entailment": 2}
    r = harness.call_retrying(env.stub.Generate, _req(pb.UNCERTAINTY_METHOD_MULTINOMIAL, nli="nli-imported"),
                              env.md, timeout=120, call_timeout=110)
    assert r.uncertainty.nli_model.name == "nli-imported" and r.uncertainty.clusters
    with pytest.raises(grpc.RpcError) as e:
        env.stub.StartImportNLIModelJob(pb.StartImportNLIModelJobRequest(model_name="x", path=""), metadata=env.md)
    code, _, bad, _ = rpc_error_details(e.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == "path"


@pytest.mark.parametrize(("prompt", "question"), [
    ("Q: What is the capital of Italy?\nA: Rome\nQ: What is the capital of Mongolia?\nA:",
     "Q: What is the capital of Mongolia?"),
    ("Question: Who wrote Ulysses?\nAnswer:  \n", "Question: Who wrote Ulysses?"),
    ("question : where does the river go ? answer :", "question : where does the river go ? answer :"),
    ("Q: Who? A:", "Q: Who? A:"),
    ("A:\n", ""),
])
def test_the_default_question_skips_a_bare_answer_cue(prompt, question):
    """Without uncertainty.question the NLI reads the prompt's last line that is not "A:" (a few-shot prompt's
    last line is the cue, and the NLI compared "A: Mongolia" with "A: Beijing")."""
    from services.generation.api import prompt_question

    assert prompt_question(prompt) == question
