"""The OpenAI-compatible predictor with the official `openai` client: `praxon predictor generation --tenant T
--model lm@production` (kserve's ModelServer, a subprocess on loopback) serving a tiny Llama registered in the
registry (PostgreSQL + S3). Completions and chat completions, with and without stream; greedy and seeded outputs
equal the engine's own for the same prompt; bad fields -> 400 naming the field (a NUL character anywhere, a chat message
without content); an unknown model -> 404; every error (a wrong token's 401, an unknown route's 404) in OpenAI's
error body, so the client shows the server's message. In-process: a full engine queue -> 429 with Retry-After, and
the chat template path."""
from __future__ import annotations

import json
import socket
import uuid
from types import SimpleNamespace

import openai
import pytest

from services.generation.engine import Engine, SamplingParams
from services.generation.openai_api import CHAT_FALLBACK
from tests import harness
from tests.generation.conftest import OpenAIServer, generation_predictor, openai_service, tiny_llama

PROMPT = "record : key kafo value 1 2 3 4 ; lookup : key"


def _register(settings, tenant: str, name: str, model, tokenizer) -> None:
    """A version registered the way a job does (staged by a running job, numbered on commit), alias production."""
    from services.common import hf

    tensors, config = hf.from_pretrained_objects(model, tokenizer)
    harness.register_model(settings, tenant, name, tensors, kind=hf.REGISTRY_KIND, config=config, alias="production")


@pytest.fixture(scope="module")
def served(settings, tokenizer, tmp_path_factory):
    tenant, token = harness.token_for(settings, f"oai-{uuid.uuid4().hex[:6]}")  # the OpenAI client's API key
    model = tiny_llama(tokenizer, seed=11)
    _register(settings, tenant, "lm", model, tokenizer)
    log = tmp_path_factory.mktemp("predictor") / "predictor.log"
    engine = Engine(model, tokenizer, name="local").start()  # the reference: the same engine code, in this process
    try:
        with generation_predictor(settings, tenant, "lm@production", log) as http:
            yield SimpleNamespace(port=http, tokenizer=tokenizer, engine=engine, log=log,
                                  client=openai.OpenAI(base_url=f"http://127.0.0.1:{http}/v1", api_key=token,
                                                       max_retries=0, timeout=60),
                                  kserve_client=openai.OpenAI(base_url=f"http://127.0.0.1:{http}/openai/v1",
                                                              api_key=token, max_retries=0, timeout=60))
    finally:
        engine.stop()


def _local(served, text: str, **sampling):
    ids = served.engine.encode(text)
    events, fin = served.engine.generate(ids, SamplingParams(**sampling))
    return events, fin


def test_completion_greedy_equals_the_engine(served):
    for client in (served.client, served.kserve_client):  # base_url .../v1 and kserve's .../openai/v1
        r = client.completions.create(model="lm", prompt=PROMPT, max_tokens=8, temperature=0, logprobs=2,
                                      extra_body={"ignore_eos": True})
        events, fin = _local(served, PROMPT, max_new_tokens=8, ignore_eos=True, logprobs=2)
        c = r.choices[0]
        assert c.text == fin.text and c.finish_reason == "length" == fin.finish_reason
        assert c.logprobs.tokens == [served.tokenizer.decode([e.token_id]) for e in events]
        assert c.logprobs.token_logprobs == pytest.approx([e.logprob for e in events], abs=1e-4)
        assert [len(t) for t in c.logprobs.top_logprobs] == [2] * 8
        assert r.usage.prompt_tokens == len(served.engine.encode(PROMPT)) and r.usage.completion_tokens == 8
        assert r.usage.total_tokens == r.usage.prompt_tokens + 8 and r.model == "lm"


def test_completion_stream_equals_non_stream(served):
    kw = dict(model="lm", prompt=[PROMPT], max_tokens=10, temperature=0, extra_body={"ignore_eos": True})
    whole = served.client.completions.create(**kw)
    chunks = list(served.client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text and len(text) > 0
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10


def test_seeded_sampling_reproduces_and_equals_the_engine(served):
    kw = dict(model="lm", prompt=PROMPT, max_tokens=12, temperature=1.0, top_p=0.9, seed=7,
              extra_body={"ignore_eos": True})
    a = served.client.completions.create(**kw).choices[0].text
    b = served.client.completions.create(**kw).choices[0].text
    _, fin = _local(served, PROMPT, max_new_tokens=12, temperature=1.0, top_p=0.9, seed=7, ignore_eos=True)
    assert a == b == fin.text


def test_stop_strings_end_the_text(served):
    full = served.client.completions.create(model="lm", prompt=PROMPT, max_tokens=12, temperature=0,
                                            extra_body={"ignore_eos": True}).choices[0].text
    stop = full.strip()[2:4]  # something the greedy text contains, after its start
    assert stop
    r = served.client.completions.create(model="lm", prompt=PROMPT, max_tokens=12, temperature=0, stop=[stop],
                                         extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text == full[:full.index(stop)]


def test_chat_completion_and_stream_equal_the_engine(served):
    messages = [{"role": "system", "content": "answer briefly"}, {"role": "user", "content": "lookup : key kafo"}]
    text = "".join(CHAT_FALLBACK.format(**m) for m in messages) + "assistant:"  # the tokenizer has no template
    _, fin = _local(served, text, max_new_tokens=8, ignore_eos=True, logprobs=1)
    r = served.client.chat.completions.create(model="lm", messages=messages, max_tokens=8, temperature=0,
                                              logprobs=True, top_logprobs=1, extra_body={"ignore_eos": True})
    m = r.choices[0]
    assert m.message.role == "assistant" and m.message.content == fin.text and m.finish_reason == "length"
    assert [t.token for t in m.logprobs.content] == [served.tokenizer.decode([i]) for i in fin.token_ids]
    assert all(len(t.top_logprobs) == 1 for t in m.logprobs.content)
    stream = list(served.client.chat.completions.create(model="lm", messages=messages, max_completion_tokens=8,
                                                        temperature=0, stream=True,
                                                        extra_body={"ignore_eos": True}))
    assert stream[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in stream) == fin.text
    assert stream[-1].choices[0].finish_reason == "length"


def test_models_list(served):
    assert [m.id for m in served.client.models.list()] == ["lm"]
    assert [m.id for m in served.kserve_client.models.list()] == ["lm"]


@pytest.mark.parametrize(("kw", "param"), [
    ({"n": 2}, "n"),
    ({"temperature": -0.5}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 250}, "max_tokens"),              # prompt + max_tokens past the context (256)
    ({"prompt": ""}, "prompt"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": "lookup " * 400}, "prompt"),         # longer than the context
    ({"seed": -1}, "seed"),
    ({"logprobs": 99}, "logprobs"),
    ({"stop": ["x"] * 9}, "stop"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"extra_body": {"no_such_field": 1}}, "no_such_field"),
])
def test_bad_fields_are_400_naming_the_field(served, kw, param):
    args = {"model": "lm", "prompt": PROMPT, "max_tokens": 4, **kw}
    for stream in (False, True):  # refused before any event is streamed
        with pytest.raises(openai.BadRequestError) as err:
            served.client.completions.create(stream=stream, **args)
        assert err.value.status_code == 400 and err.value.body["param"] == param, err.value.body
        assert err.value.body["type"] == "invalid_request_error"


def test_bad_chat_fields_are_400(served):
    with pytest.raises(openai.BadRequestError) as err:
        served.client.chat.completions.create(model="lm", messages=[{"role": "wizard", "content": "hi"}])
    assert err.value.body["param"] == "messages[0].role"
    with pytest.raises(openai.BadRequestError) as err:
        served.client.chat.completions.create(model="lm", messages=[{"role": "user", "content": "hi"}], n=3)
    assert err.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as err:
        served.client.chat.completions.create(model="lm", messages=[])
    assert err.value.body["param"] == "messages"


def test_unknown_model_is_404(served):
    with pytest.raises(openai.NotFoundError) as err:
        served.client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=2)
    assert err.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        served.client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])


@pytest.mark.parametrize(("chat", "kw", "param"), [
    (False, {"prompt": "lookup \x00 key"}, "prompt"),
    (False, {"prompt": ["lookup : key\x00"]}, "prompt[0]"),
    (False, {"stop": ["x", "\x00"]}, "stop[1]"),
    (False, {"stop": "a\x00"}, "stop"),
    (False, {"user": "u\x00"}, "user"),
    (True, {"messages": [{"role": "user", "content": "hi\x00there"}]}, "messages[0].content"),
    (True, {"messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "\x00"}]}]},
     "messages[1].content[1].text"),
    (True, {"messages": [{"role": "user", "content": "hi", "name": "n\x00"}]}, "messages[0].name"),
    (True, {"messages": [{"role": "user", "content": "hi"}], "stop": ["\x00"]}, "stop[0]"),
])
def test_a_nul_character_is_400_naming_the_field(served, chat, kw, param):
    """As the gRPC service refuses it (services.common.server.check_request_content): before, these were answered."""
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as err:
            if chat:
                served.client.chat.completions.create(model="lm", max_tokens=2, stream=stream, **kw)
            else:
                served.client.completions.create(model="lm", max_tokens=2, stream=stream, **{"prompt": PROMPT, **kw})
        assert err.value.body["param"] == param and err.value.body["code"] == "nul_character", err.value.body
        assert "NUL" in err.value.message and err.value.body["type"] == "invalid_request_error"


@pytest.mark.parametrize(("messages", "param", "says"), [
    ([{"role": "user"}], "messages[0].content", "required"),
    ([{"role": "system", "content": "be brief"}, {"role": "user", "content": None}], "messages[1].content", "required"),
    ([{"role": "system", "content": None}, {"role": "user", "content": "hi"}], "messages[0].content", "required"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}, {"role": "user", "content": "x"}],
     "messages[1].content", "no tools"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant"}], "messages[1].content", "no tools"),
])
def test_a_chat_message_without_content_is_400(served, messages, param, says):
    with pytest.raises(openai.BadRequestError) as err:
        served.client.chat.completions.create(model="lm", messages=messages, max_tokens=2)
    assert err.value.body["param"] == param and says in err.value.body["message"], err.value.body


def test_a_wrong_token_is_an_authentication_error_with_the_servers_message(served):
    for base in ("v1", "openai/v1"):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{served.port}/{base}", api_key="praxon_wrong",
                               max_retries=0, timeout=30)
        for call, kw in ((client.completions.create, {"model": "lm", "prompt": PROMPT, "max_tokens": 2}),
                         (client.chat.completions.create, {"model": "lm", "messages": [{"role": "user",
                                                                                       "content": "x"}]}),
                         (client.models.list, {})):
            with pytest.raises(openai.AuthenticationError) as err:
                call(**kw)
            message = "invalid or revoked API token for this predictor's tenant"
            assert err.value.message == f"Error code: 401 - {message}"  # before: only "Error code: 401"
            assert err.value.body == {"message": message, "type": "invalid_request_error", "param": None,
                                      "code": "invalid_api_key"}
            assert err.value.response.headers["www-authenticate"] == "Bearer"


def test_other_errors_have_openais_body_and_oip_paths_keep_theirs(served):
    import httpx

    url = f"http://127.0.0.1:{served.port}"
    r = httpx.post(f"{url}/v1/completions", json={"model": "lm", "prompt": "x"}, timeout=30)  # no token at all
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert "missing bearer token" in r.json()["error"]["message"]
    auth = {"Authorization": f"Bearer {served.client.api_key}"}
    r = httpx.post(f"{url}/v1/no/such/route", json={}, headers=auth, timeout=30)
    assert r.status_code == 404 and r.json() == {"error": {"message": "Invalid URL (POST /v1/no/such/route)",
                                                           "type": "invalid_request_error", "param": None,
                                                           "code": "unknown_url"}}
    with pytest.raises(openai.NotFoundError) as err:  # what the client shows for it
        served.client.post("/no/such/route", body={}, cast_to=object)
    assert err.value.message == "Error code: 404 - Invalid URL (POST /v1/no/such/route)"
    r = httpx.get(f"{url}/v1/completions", headers=auth, timeout=30)
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    # the Open Inference Protocol's paths answer as its clients (tritonclient, kserve's) read: {"error": "<string>"}
    r = httpx.post(f"{url}/v2/models/generation/infer", json={"inputs": []}, timeout=30)
    assert r.status_code == 401 and isinstance(r.json()["error"], str)


# ---------------------------------------------------------------------------------------------- in process
def test_a_full_queue_is_429_with_retry_after(llama, tokenizer):
    engine = Engine(llama, tokenizer, max_queued=0, retry_after_s=2.5, name="full")  # every request is refused
    server = OpenAIServer(openai_service(engine, tokenizer))
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.RateLimitError) as err:
            client.completions.create(model="m", prompt=PROMPT, max_tokens=2)
        assert err.value.status_code == 429 and err.value.response.headers["retry-after"] == "3"
        assert err.value.body["code"] == "queue_full"
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True)
    finally:
        server.stop()
        engine.stop()


def test_chat_uses_the_tokenizers_template_when_it_has_one(llama, tokenizer):
    import copy

    templated = copy.deepcopy(tokenizer)
    templated.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                               "{% if add_generation_prompt %}<assistant>{% endif %}")
    engine = Engine(llama, templated, name="templated").start()
    server = OpenAIServer(openai_service(engine, templated))
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="x", max_retries=0)
        msgs = [{"role": "user", "content": [{"type": "text", "text": "lookup : "}, {"type": "text", "text": "key"}]}]
        r = client.chat.completions.create(model="m", messages=msgs, max_tokens=6, temperature=0,
                                           extra_body={"ignore_eos": True})
        _, fin = engine.generate(engine.encode("<user>lookup : key\n<assistant>"),
                                 SamplingParams(max_new_tokens=6, ignore_eos=True))
        assert r.choices[0].message.content == fin.text and r.usage.completion_tokens == 6
        fallback = engine.encode("user: lookup : key\nassistant:")
        assert r.usage.prompt_tokens == len(engine.encode("<user>lookup : key\n<assistant>")) != len(fallback)
    finally:
        server.stop()
        engine.stop()


@pytest.mark.parametrize("path", ["completions", "chat/completions"])
def test_a_client_that_disconnects_frees_its_sequence(tokenizer, path):
    """A non-streaming request whose HTTP client goes away mid-generation is cancelled: the engine frees its
    sequence long before the 1000 tokens it asked for (without the disconnect watch it generated them all)."""
    engine = Engine(tiny_llama(tokenizer, seed=5, context=1100), tokenizer, name="gone").start()
    server = OpenAIServer(openai_service(engine, tokenizer))
    try:
        body = {"model": "m", "max_tokens": 1000, "temperature": 0, "ignore_eos": True,
                **({"prompt": PROMPT} if path == "completions" else
                   {"messages": [{"role": "user", "content": PROMPT}]})}
        data = json.dumps(body).encode()
        freed, tokens = engine.freed_sequences, engine.stats()["tokens_out"]
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(f"POST /v1/{path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
            harness.wait_for(lambda: engine.stats()["tokens_out"] > tokens, timeout=30, interval=0.005,
                             what="the generation to start")
        # the socket is closed: the client is gone mid-generation
        harness.wait_for(lambda: engine.freed_sequences == freed + 1 and engine.stats()["running"] == 0,
                         timeout=60, what="the sequence to leave")
        st = engine.stats()
        assert st["cache_bytes"] == 0 and st["tokens_out"] - tokens < 1000
    finally:
        server.stop()
        engine.stop()
