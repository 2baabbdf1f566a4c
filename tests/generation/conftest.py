"""Small models for the generation tests: a BPE tokenizer trained on a slice of the built-in corpus, a random tiny
Llama (grouped-query attention) and a random tiny GPT-2 (seeded); the OpenAI routes over a local engine on a
loopback port (the 429 / chat-template tests, and the upstream of the remote-backend tests)."""
from __future__ import annotations

import contextlib
import socket
import threading
from types import SimpleNamespace

import pytest
import torch


@pytest.fixture(scope="session")
def tokenizer():
    from services.generation import corpus
    from services.generation.training import train_tokenizer

    return train_tokenizer(corpus.builtin_corpus(0, n_retrieval=200, qa_repeats=1), 400)


def tiny_llama(tokenizer, seed: int = 0, layers: int = 2, context: int = 256):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context,
                      eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                      pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).eval()


def tiny_gpt2(tokenizer, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=len(tokenizer), n_embd=64, n_layer=2, n_head=4, n_positions=256,
                     eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    return GPT2LMHeadModel(cfg).eval()


@pytest.fixture(scope="session")
def llama(tokenizer):
    return tiny_llama(tokenizer)


@pytest.fixture(scope="session")
def gpt2(tokenizer):
    return tiny_gpt2(tokenizer)


class OpenAIServer:
    """The OpenAI router on a bare FastAPI app, served by uvicorn in a thread on a loopback port."""

    def __init__(self, service):
        import uvicorn
        from fastapi import FastAPI

        from services.generation.openai_api import router
        from tests import harness

        app = FastAPI()
        app.include_router(router(service))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        harness.wait_for(lambda: self.server.started, timeout=30, what="uvicorn")

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)


def openai_service(engine, tokenizer, name: str = "m"):
    """The OpenAI routes over one local Engine, serving it under `name`."""
    from services.generation.openai_api import OpenAIService
    from services.generation.settings import GenerationConfig

    loaded = SimpleNamespace(engine=engine, tokenizer=tokenizer)

    async def current():
        return loaded
    return OpenAIService(current, [name], GenerationConfig())


def write_llama_gguf(model, tokenizer, path, quantize: str | None = None) -> None:
    """Write a transformers Llama and its byte-level BPE tokenizer as a GGUF file the way llama.cpp's converter
    lays it out (tensor names from the gguf package's map, q/k rows permuted for llama.cpp's RoPE, a "gpt2" tokenizer);
    quantize="Q8_0" stores the 2-D weights quantised."""
    import json

    import gguf
    import numpy as np

    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if quantize else gguf.LlamaFileType.ALL_F32)
    vocab = tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    special = set(tokenizer.all_special_ids)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for i in range(len(tokens))])
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    w.add_bos_token_id(tokenizer.bos_token_id)
    w.add_eos_token_id(tokenizer.eos_token_id)
    w.add_pad_token_id(tokenizer.pad_token_id)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)

    def permute(x, n):  # llama.cpp's order of the rotary halves (transformers' loader undoes it)
        return x.reshape(n, 2, x.shape[0] // n // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)

    for k, t in model.state_dict().items():
        if k == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        a = t.detach().float().numpy()
        if k.endswith("q_proj.weight"):
            a = permute(a, cfg.num_attention_heads)
        elif k.endswith("k_proj.weight"):
            a = permute(a, cfg.num_key_value_heads)
        name = names.get_name(k, try_suffixes=(".weight", ".bias"))
        if quantize and a.ndim == 2:
            qtype = gguf.GGMLQuantizationType[quantize]
            w.add_tensor(name, gguf.quants.quantize(np.ascontiguousarray(a), qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def generation_predictor(settings, tenant: str, model: str, log, ready_s: float = 120):
    """`praxon predictor generation --tenant T --model M` as a subprocess on loopback (kserve's ModelServer), until
    it answers ready; yields its HTTP port; terminated on exit."""
    import os
    import sys

    import httpx

    from services.common.embedded import spawn
    from tests import harness

    http, grpc_port = _free_port(), _free_port()
    env = {**os.environ, **harness.settings_env(settings), "PYTHONPATH": str(harness.ROOT), "OMP_NUM_THREADS": "1"}
    proc = spawn([sys.executable, "-m", "services.cli.main", "predictor", "generation", "--tenant", tenant,
                  "--model", model, "--http-port", str(http), "--grpc-port", str(grpc_port)], log, env=env)

    def ready():
        if proc.poll() is not None:
            raise AssertionError(log.read_text()[-3000:])
        try:
            return httpx.get(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        harness.wait_for(ready, timeout=ready_s, interval=0.3, what="the generation predictor")
        yield http
    finally:
        proc.terminate()
        proc.wait(30)
