"""GenerationService end to end: the real gRPC server and interceptors, a `praxon worker` subprocess, PostgreSQL
and S3. Training and import jobs (upload, local path, pickled and malformed uploads), Generate / GenerateStream /
CountTokens, KV compression through the API, hot swap by alias, cancellation on disconnect and deadline, and every
bad input of the issue (INVALID_ARGUMENT naming the field; an unknown model is NOT_FOUND)."""
from __future__ import annotations

import io
import json
import tarfile
import time
import uuid
from types import SimpleNamespace

import grpc
import pytest
import torch

from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc
from praxon.common.v1 import common_pb2
from praxon.generation.v1 import generation_pb2 as pb
from praxon.generation.v1 import generation_pb2_grpc
from praxon.models.v1 import models_pb2, models_pb2_grpc
from services.generation.settings import GenerationConfig
from tests import harness
from tests.generation.conftest import tiny_gpt2, tiny_llama, write_llama_gguf
from tests.harness import auth, job_row, rpc_error_details, wait_for

QUEUES = "default,training"
TRAIN = pb.LanguageModelTrainingParams(steps=6, batch_size=4, hidden_size=32, num_layers=2, num_heads=2,
                                       vocab_size=320, builtin_retrieval_docs=40, builtin_max_records=3,
                                       max_seq_len=96, steps_per_checkpoint=3)


def _upload(channel, token, name, data, content_type="application/gzip") -> str:
    stub = artifacts_pb2_grpc.ArtifactServiceStub(channel)
    step = 512 * 1024
    reqs = [artifacts_pb2.UploadArtifactRequest(name=name, content_type=content_type, chunk=data[:step])]
    reqs += [artifacts_pb2.UploadArtifactRequest(chunk=data[i:i + step]) for i in range(step, len(data), step)]
    return stub.UploadArtifact(iter(reqs), metadata=auth(token)).artifact.id


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(f"model/{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _dir_files(model, tokenizer, path) -> dict[str, bytes]:
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return {f.name: f.read_bytes() for f in path.iterdir() if f.is_file()}


def _wait(settings, job_id, ok=True, timeout=240) -> dict:
    row = wait_for(lambda: (r := job_row(settings, job_id))["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") and r,
                   timeout, interval=0.2, what=f"job {job_id}")
    if ok:
        assert row["state"] == "SUCCEEDED", (row["error_reason"], row["error_message"])
    return row


@pytest.fixture(scope="module")
def settings(settings, tmp_path_factory):
    with harness.private_platform(settings) as private:
        root = tmp_path_factory.mktemp("import-root")
        private.generation = GenerationConfig(import_roots=[str(root)], alias_check_s=0.5)
        yield private


def _root(settings):
    from pathlib import Path

    return Path(settings.generation.import_roots[0])


@pytest.fixture(scope="module")
def env(settings, tmp_path_factory, tokenizer):
    import os

    tenant, token = harness.token_for(settings, f"gen-{uuid.uuid4().hex[:6]}")
    server = harness.PlatformServer(settings, ["platform", "generation"])
    os.environ["PRAXON_GENERATION__IMPORT_ROOTS"] = f'["{_root(settings)}"]'
    try:
        worker = harness.Worker(settings, tmp_path_factory.mktemp("gen-workers"), QUEUES)
    finally:
        os.environ.pop("PRAXON_GENERATION__IMPORT_ROOTS", None)
    channel = grpc.insecure_channel(server.address)
    stub = generation_pb2_grpc.GenerationServiceStub(channel)
    md = auth(token)
    # an uploaded GPT-2 and a Llama from a local path, both imported by jobs
    gpt2 = tiny_gpt2(tokenizer, seed=5)
    gpt2_files = _dir_files(gpt2, tokenizer, tmp_path_factory.mktemp("gpt2"))
    art = _upload(channel, token, "gpt2.tar.gz", _tar(gpt2_files))
    j1 = stub.StartImportLanguageModelJob(pb.StartImportLanguageModelJobRequest(model_name="gpt2-tiny",
                                                                                artifact_id=art), metadata=md).job
    llama = tiny_llama(tokenizer, seed=6)
    lpath = _root(settings) / "llama"
    _dir_files(llama, tokenizer, lpath)
    j2 = stub.StartImportLanguageModelJob(pb.StartImportLanguageModelJobRequest(model_name="llama-tiny",
                                                                                path=str(lpath)), metadata=md).job
    j3 = stub.StartLanguageModelTrainingJob(pb.StartLanguageModelTrainingJobRequest(model_name="trained", params=TRAIN),
                                            metadata=md).job
    rows = [_wait(settings, j.id) for j in (j1, j2, j3)]
    e = SimpleNamespace(server=server, worker=worker, channel=channel, stub=stub, md=md, token=token, tenant=tenant,
                        gpt2=gpt2, llama=llama, gpt2_files=gpt2_files, rows=rows, tokenizer=tokenizer,
                        registry=models_pb2_grpc.ModelRegistryServiceStub(channel), settings=settings)
    yield e
    worker.stop()
    channel.close()
    server.stop()


def _gen(env, prompt, name="gpt2-tiny", **sampling):
    sp = pb.SamplingParams(**sampling)
    return harness.call_retrying(env.stub.Generate, pb.GenerateRequest(model=common_pb2.ModelRef(name=name),
                                                                       prompt=prompt, sampling=sp), env.md)


def test_jobs_registered_versions(env):
    gpt2, llama, trained = (r["result"] for r in env.rows)
    assert gpt2["model_type"] == "gpt2" and llama["model_type"] == "llama"
    assert trained["metrics"]["validation_perplexity"] > 1 and len(trained["losses"]) == 6
    for name in ("gpt2-tiny", "llama-tiny", "trained"):
        v = env.registry.GetModelVersion(models_pb2.GetModelVersionRequest(model=common_pb2.ModelRef(name=name)),
                                         metadata=env.md).version
        assert v.version == 1


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
def test_generate_equals_transformers_and_stream_equals_generate(env, name):
    model = env.gpt2 if name == "gpt2-tiny" else env.llama
    prompt = "record : key kafo value 1 2 3 4 ; lookup : key"
    resp = _gen(env, prompt, name, max_new_tokens=8, ignore_eos=True, top_logprobs=2)
    ids = torch.tensor([env.tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    want = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None,
                          pad_token_id=env.tokenizer.pad_token_id)[0, ids.shape[1]:].tolist()
    assert [t.token_id for t in resp.tokens] == want
    assert resp.finish_reason == pb.FINISH_REASON_LENGTH and resp.usage.completion_tokens == 8
    assert resp.usage.prompt_tokens == ids.shape[1] and len(resp.tokens[0].top_logprobs) == 2
    assert resp.model.name == name and resp.model.version == 1 and resp.model.context_length == 256
    stream = list(env.stub.GenerateStream(pb.GenerateStreamRequest(
        model=common_pb2.ModelRef(name=name), prompt=prompt,
        sampling=pb.SamplingParams(max_new_tokens=8, ignore_eos=True)), metadata=env.md, timeout=60))
    assert [m.token.token_id for m in stream[:-1]] == want
    assert "".join(m.token.text for m in stream[:-1]) == resp.text
    assert stream[-1].finish_reason == pb.FINISH_REASON_LENGTH and stream[0].model.name == name
    count = env.stub.CountTokens(pb.CountTokensRequest(model=common_pb2.ModelRef(name=name), text=prompt),
                                 metadata=env.md)
    assert count.count == ids.shape[1] and list(count.token_ids) == ids[0].tolist()


def _json_stream(text: str) -> list[dict]:
    """The JSON documents `buf curl` prints one after another for a server stream."""
    dec, out, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        doc, i = dec.raw_decode(text, i)
        out.append(doc)
    return out


def test_buf_curl_streams_generate_stream(env):
    """An outside gRPC client (buf's, found by reflection, bearer token in a header) reads the server stream."""
    from tests.platform.test_external_client import buf_curl  # buf: installed in .tools by make test (buf lint)

    body = {"model": {"name": "gpt2-tiny"}, "prompt": "records : kafo bam ; lookup",
            "sampling": {"maxNewTokens": 5, "ignoreEos": True}}
    out = buf_curl(env.server.address, "praxon.generation.v1.GenerationService/GenerateStream", body,
                   [f"authorization: Bearer {env.token}"])
    assert out.returncode == 0, out.stderr
    msgs = _json_stream(out.stdout)
    want = list(env.stub.GenerateStream(pb.GenerateStreamRequest(
        model=common_pb2.ModelRef(name="gpt2-tiny"), prompt=body["prompt"],
        sampling=pb.SamplingParams(max_new_tokens=5, ignore_eos=True)), metadata=env.md, timeout=60))[:-1]
    assert len(msgs) == 6 and all("token" in m and "finishReason" not in m for m in msgs[:-1])
    # greedy: the same tokens as the Python stub's stream (proto3 JSON omits zero / empty fields)
    assert [m["token"].get("tokenId", 0) for m in msgs[:-1]] == [m.token.token_id for m in want]
    assert "".join(m["token"].get("text", "") for m in msgs[:-1]) == "".join(m.token.text for m in want)
    assert msgs[0]["model"]["name"] == "gpt2-tiny" and "model" not in msgs[1]
    last = msgs[-1]
    assert last["finishReason"] == "FINISH_REASON_LENGTH" and "token" not in last
    assert last["usage"]["completionTokens"] == 5 and last["usage"]["promptTokens"] > 0
    denied = buf_curl(env.server.address, "praxon.generation.v1.GenerationService/GenerateStream", body)
    assert denied.returncode != 0 and "unauthenticated" in denied.stderr.lower()


def test_the_trained_model_generates(env):
    resp = _gen(env, "question : where does", "trained", max_new_tokens=5, ignore_eos=True)
    assert len(resp.tokens) == 5 and resp.model.model_type == "llama"


def test_kv_compression_through_the_api(env):
    prompt = "record : key kafo value 1 2 3 4 ; record : key mone value 5 6 7 8 ; lookup : key kafo value"
    base = pb.GenerateRequest(model=common_pb2.ModelRef(name="llama-tiny"), prompt=prompt,
                              sampling=pb.SamplingParams(max_new_tokens=4, ignore_eos=True))
    full = harness.call_retrying(env.stub.Generate, base, env.md)
    m = full.usage.prompt_tokens
    for policy in (pb.CACHE_POLICY_VL_CACHE, pb.CACHE_POLICY_H2O, pb.CACHE_POLICY_STREAMING_LLM):
        req = pb.GenerateRequest()
        req.CopyFrom(base)
        req.kv_compression.CopyFrom(pb.KvCompression(policy=policy, retention=1.0))
        same = env.stub.Generate(req, metadata=env.md)
        assert [t.token_id for t in same.tokens] == [t.token_id for t in full.tokens]
        req.kv_compression.retention = 0.1
        small = env.stub.Generate(req, metadata=env.md)
        assert sum(small.cache.layer_budgets) == int(0.1 * 2 * m + 0.5)
        assert small.cache.kept_bytes < small.cache.full_bytes == full.cache.full_bytes
        assert small.cache.policy == policy and small.cache.prompt_kept_fraction < 0.2


def _bad(env, req, field, code=grpc.StatusCode.INVALID_ARGUMENT, method=None):
    with pytest.raises(grpc.RpcError) as err:
        (method or env.stub.Generate)(req, metadata=env.md, timeout=30)
    c, info, bad, _ = rpc_error_details(err.value)
    assert c == code, (field, err.value.details())
    if field:
        assert bad is not None and bad.field_violations[0].field == field, (field, bad)


def test_bad_input_names_the_field(env):
    ref = common_pb2.ModelRef(name="gpt2-tiny")
    sp = pb.SamplingParams
    _bad(env, pb.GenerateRequest(model=ref, prompt=""), "prompt")
    _bad(env, pb.GenerateRequest(model=ref, prompt="lookup " * 400), "prompt")  # longer than the context (256)
    _bad(env, pb.GenerateRequest(model=ref, prompt="a", sampling=sp(max_new_tokens=0)), "sampling.max_new_tokens")
    _bad(env, pb.GenerateRequest(model=ref, prompt="a", sampling=sp(max_new_tokens=-3)), "sampling.max_new_tokens")
    _bad(env, pb.GenerateRequest(model=ref, prompt="a", sampling=sp(temperature=-0.5)), "sampling.temperature")
    _bad(env, pb.GenerateRequest(model=ref, prompt="a", sampling=sp(temperature=float("nan"))),
         "sampling.temperature")
    for top_p in (0.0, 1.5, -1.0):
        _bad(env, pb.GenerateRequest(model=ref, prompt="a", sampling=sp(top_p=top_p)), "sampling.top_p")
    for alpha in (0.0, 1.5, -0.1):
        _bad(env, pb.GenerateRequest(model=ref, prompt="a", kv_compression=pb.KvCompression(
            policy=pb.CACHE_POLICY_VL_CACHE, retention=alpha)), "kv_compression.retention")
    _bad(env, pb.GenerateRequest(model=ref, prompt="a", kv_compression=pb.KvCompression(policy=42)),
         "kv_compression.policy")
    _bad(env, pb.GenerateStreamRequest(model=ref, prompt=""), "prompt",
         method=lambda r, **kw: list(env.stub.GenerateStream(r, **kw)))
    _bad(env, pb.GenerateRequest(model=common_pb2.ModelRef(name="no-such-model"), prompt="a"), None,
         grpc.StatusCode.NOT_FOUND)
    _bad(env, pb.CountTokensRequest(model=common_pb2.ModelRef(name="no-such-model"), text="a"), None,
         grpc.StatusCode.NOT_FOUND, method=env.stub.CountTokens)
    _bad(env, pb.StartLanguageModelTrainingJobRequest(params=pb.LanguageModelTrainingParams(steps=0)),
         "params.steps", method=env.stub.StartLanguageModelTrainingJob)
    for params, field in [(dict(builtin_tasks="facts\0"), "params.builtin_tasks"),
                          (dict(init_std=float("nan")), "params.init_std"),
                          (dict(builtin_min_records=9, builtin_max_records=4), "params.builtin_max_records")]:
        _bad(env, pb.StartLanguageModelTrainingJobRequest(params=pb.LanguageModelTrainingParams(**params)), field,
             method=env.stub.StartLanguageModelTrainingJob)
    _bad(env, pb.StartLanguageModelTrainingJobRequest(model_name="bad name"), "model_name",
         method=env.stub.StartLanguageModelTrainingJob)
    _bad(env, pb.StartImportLanguageModelJobRequest(model_name="x"), "artifact_id",
         method=env.stub.StartImportLanguageModelJob)
    _bad(env, pb.StartImportLanguageModelJobRequest(model_name="x", path="/etc"), "path",
         method=env.stub.StartImportLanguageModelJob)
    _bad(env, pb.StartImportLanguageModelJobRequest(model_name="x", artifact_id="not-a-uuid"), "artifact_id",
         method=env.stub.StartImportLanguageModelJob)


def test_pickled_and_malformed_uploads_fail_their_job_and_store_nothing(env):
    files = dict(env.gpt2_files)
    files.pop("model.safetensors")
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(1)}, buf)
    files["pytorch_model.bin"] = buf.getvalue()
    cases = {"pickled": (_tar(files), "pickled checkpoint 'pytorch_model.bin' refused"),
             "garbage": (b"this is not an archive" * 10, "archive"),
             "gguf": (b"GGUF" + b"\xff" * 300, "not a readable GGUF file")}
    for name, (data, message) in cases.items():
        art = _upload(env.channel, env.token, f"{name}.tar.gz", data)
        job = env.stub.StartImportLanguageModelJob(pb.StartImportLanguageModelJobRequest(
            model_name=f"bad-{name}", artifact_id=art), metadata=env.md).job
        row = _wait(env.settings, job.id, ok=False)
        assert row["state"] == "FAILED" and message in row["error_message"], row["error_message"]
        assert row["attempts"] == 1  # bad input is not retried
        with pytest.raises(grpc.RpcError) as err:  # no model (and so no version) was stored
            env.registry.ListModelVersions(models_pb2.ListModelVersionsRequest(name=f"bad-{name}"), metadata=env.md)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_gguf_upload_is_imported_and_generates_what_the_original_does(env, tmp_path):
    path = tmp_path / "llama.gguf"
    write_llama_gguf(env.llama, env.tokenizer, path, quantize="Q8_0")
    art = _upload(env.channel, env.token, "llama.gguf", path.read_bytes(), "application/octet-stream")
    job = env.stub.StartImportLanguageModelJob(pb.StartImportLanguageModelJobRequest(
        model_name="llama-gguf", artifact_id=art), metadata=env.md).job
    result = _wait(env.settings, job.id)["result"]
    assert result["model_type"] == "llama" and result["gguf_file_type"] == "MOSTLY_Q8_0"
    v = env.registry.GetModelVersion(models_pb2.GetModelVersionRequest(model=common_pb2.ModelRef(name="llama-gguf")),
                                     metadata=env.md).version
    assert v.version == 1
    # the served model is transformers' own reading of the file
    from services.common import hf

    dequantised, _ = hf.load_model(*hf.gguf_to_registry(path))
    prompt = "fact : the person"
    got = _gen(env, prompt, name="llama-gguf", max_new_tokens=6, ignore_eos=True)
    ids = torch.tensor([env.tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    want = dequantised.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None,
                                pad_token_id=env.tokenizer.pad_token_id)[0, ids.shape[1]:].tolist()
    assert [t.token_id for t in got.tokens] == want


def _engine(env, name):
    servicer = env.server.app.extras["generation_servicer"]
    return [m.engine for m in servicer.models._loaded.values() if m.info.name == name][0]


def test_disconnect_and_deadline_cancel_the_generation(env):
    _gen(env, "a", "gpt2-tiny", max_new_tokens=1)
    engine = _engine(env, "gpt2-tiny")
    freed = engine.freed_sequences
    call = env.stub.GenerateStream(pb.GenerateStreamRequest(
        model=common_pb2.ModelRef(name="gpt2-tiny"), prompt="lookup",
        sampling=pb.SamplingParams(max_new_tokens=240, ignore_eos=True)), metadata=env.md, timeout=60)
    next(call)
    next(call)
    call.cancel()
    wait_for(lambda: engine.freed_sequences == freed + 1 and engine.stats()["running"] == 0, 30,
             what="the cancelled stream's sequence to leave")
    # The deadline is a fraction of what the same generation takes here without one, so it expires mid-generation
    # however fast the machine is (a fixed 0.3 s let a fast CI machine finish all 240 tokens in time).
    req = pb.GenerateRequest(model=common_pb2.ModelRef(name="gpt2-tiny"), prompt="lookup",
                             sampling=pb.SamplingParams(max_new_tokens=240, ignore_eos=True))
    started = time.monotonic()
    assert len(env.stub.Generate(req, metadata=env.md, timeout=60).tokens) == 240
    full_s = time.monotonic() - started
    freed = engine.freed_sequences
    tokens_before = engine.stats()["tokens_out"]
    with pytest.raises(grpc.RpcError) as err:
        env.stub.Generate(req, metadata=env.md, timeout=full_s / 4)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_for(lambda: engine.stats()["running"] == 0 and engine.stats()["queued"] == 0, 30,
             what="the timed-out request's sequence to leave")
    # Cancelled mid-generation (its cache freed) or, on a very slow start, before it was admitted: never run out.
    assert engine.freed_sequences - freed <= 1
    assert engine.stats()["tokens_out"] - tokens_before < 240


def _scrape(model: str) -> dict[str, tuple[str, float]]:
    """This process's Prometheus exposition (the server runs in it): metric -> (TYPE, value for `model`)."""
    from prometheus_client import REGISTRY, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        if fam.name.startswith("praxon_generation_"):
            for sample in fam.samples:
                if sample.labels.get("model") == model:
                    assert sample.name not in out, f"two {sample.name} samples for {model}"
                    out[sample.name] = (fam.type, sample.value)
    return out


def test_metrics_count_tokens_out_as_a_counter(env):
    _gen(env, "a", "gpt2-tiny", max_new_tokens=1)
    engine = _engine(env, "gpt2-tiny")
    before = _scrape(engine.name)
    assert before["praxon_generation_tokens_out_total"][0] == "counter"
    assert "praxon_generation_tokens_out" not in before  # no gauge of the same name any more
    assert before["praxon_generation_running"][0] == "gauge" and "praxon_generation_cache_bytes" in before
    _gen(env, "a", "gpt2-tiny", max_new_tokens=7, ignore_eos=True)
    after = _scrape(engine.name)
    assert after["praxon_generation_tokens_out_total"][1] - before["praxon_generation_tokens_out_total"][1] == 7


def test_alias_hot_swap(env):
    md = env.md
    job = env.stub.StartImportLanguageModelJob(pb.StartImportLanguageModelJobRequest(
        model_name="gpt2-tiny", path=str(_root(env.settings) / "llama")), metadata=md).job
    _wait(env.settings, job.id)  # gpt2-tiny v2 is a Llama
    env.registry.SetAlias(models_pb2.SetAliasRequest(name="gpt2-tiny", alias="production", version=1), metadata=md)
    ref = common_pb2.ModelRef(name="gpt2-tiny", alias="production")
    req = pb.CountTokensRequest(model=ref, text="a")
    assert harness.call_retrying(env.stub.CountTokens, req, md).model.version == 1
    env.registry.SetAlias(models_pb2.SetAliasRequest(name="gpt2-tiny", alias="production", version=2), metadata=md)

    def swapped():
        return harness.call_retrying(env.stub.CountTokens, req, md).model.version == 2
    wait_for(swapped, 60, interval=0.3, what="the alias to be followed")
    assert harness.call_retrying(env.stub.CountTokens, req, md).model.model_type == "llama"


def test_cli_complete_streams_what_generate_returns_and_imports_an_upload(env, tmp_path):
    from services.common.client import Target
    from services.generation import cli

    target = Target(env.server.address, env.token)
    out = io.StringIO()
    model = common_pb2.ModelRef(name="llama-tiny", version=1)
    req = cli.request("lookup kafo", model=model, max_new_tokens=6)
    text, reason, cache = cli.complete(target, req, stream=True, out=out)
    assert text == _gen(env, "lookup kafo", "llama-tiny", max_new_tokens=6).text and out.getvalue() == text + "\n"
    assert reason in ("FINISH_REASON_LENGTH", "FINISH_REASON_STOP") and cache.full_bytes > 0
    d = tmp_path / "upload"
    env.llama.save_pretrained(d)
    env.tokenizer.save_pretrained(d)
    m = cli.import_model(target, "cli-import", directory=d, out=out)
    assert m.name == "cli-import" and m.version == 1 and "registered cli-import v1 (llama" in out.getvalue()
    gguf = tmp_path / "llama.gguf"  # a GGUF file is uploaded as it is (presigned) and imported
    write_llama_gguf(env.llama, env.tokenizer, gguf)
    m = cli.import_model(target, "cli-gguf", directory=gguf, out=out)
    assert m.version == 1 and "uploaded llama.gguf: artifact" in out.getvalue()
    assert "registered cli-gguf v1 (llama, 99648 parameters, from GGUF ALL_F32)" in out.getvalue()
    target.close()


def test_demo_step_trains_and_says_why_gemma_is_skipped(env, capsys, monkeypatch):
    from services.common.client import Target
    from services.generation import cli, pretrained

    target = Target(env.server.address, env.token)
    tiny = {f.name: getattr(TRAIN, f.name) for f in TRAIN.DESCRIPTOR.fields if TRAIN.HasField(f.name)}
    tiny["max_seq_len"] = 128
    # a machine without the Gemma wheels: the tiny model's steps run and the Gemma steps say why they are skipped
    monkeypatch.setattr(pretrained, "missing", lambda model=pretrained.GEMMA: "the wheels are not installed (test)")
    cli.demo(target, train_params=tiny)
    out = capsys.readouterr().out
    assert "registered tiny-llama v1" in out and "tiny model, streamed:" in out
    assert out.count(": right") + out.count(": wrong") == 1
    assert "skipped: the wheels are not installed (test)" in out and "passkey" not in out
    target.close()
