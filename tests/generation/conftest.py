"""Small models for the generation tests: a BPE tokenizer trained on a slice of the built-in corpus, a random tiny
Llama (grouped-query attention) and a random tiny GPT-2 (seeded); the OpenAI routes over a local engine on a
loopback port (the 429 / chat-template tests, and the upstream of the remote-backend tests)."""
from __future__ import annotations

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
