"""Small models for the generation tests: a BPE tokenizer trained on a slice of the built-in corpus, a random tiny
Llama (grouped-query attention) and a random tiny GPT-2 (seeded)."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def tokenizer():
    from services.generation import corpus
    from services.generation.training import train_tokenizer

    return train_tokenizer(corpus.builtin_corpus(0, n_retrieval=200, qa_repeats=1), 400)


def tiny_llama(tokenizer, seed: int = 0, layers: int = 2):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
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
