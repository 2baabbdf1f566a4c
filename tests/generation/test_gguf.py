"""GGUF import (services.common.hf.gguf_to_registry): a tiny Llama written as GGUF by the test (the gguf package, laid
out as llama.cpp's converter does) round-trips to the same logits and tokens; a quantised one is dequantised exactly
as the gguf package dequantises it; corrupt files and architectures transformers cannot read are refused, naming the
field."""
from __future__ import annotations

import hashlib

import pytest
import torch

from services.common import hf
from services.common.errors import InvalidArgument
from tests.generation.conftest import tiny_llama, write_llama_gguf

TEXT = "record : key kafo value 1 2 . fact : the person"


def test_a_float_gguf_round_trips_to_the_same_logits_and_tokens(tokenizer, tmp_path):
    model = tiny_llama(tokenizer, seed=3)
    path = tmp_path / "tiny.gguf"
    write_llama_gguf(model, tokenizer, path)
    tensors, config = hf.gguf_to_registry(path, "params.path")
    assert config["model_type"] == "llama" and config["format"] == hf.HF_FORMAT
    meta = config["gguf"]
    assert meta["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert meta["file_type"] == "ALL_F32" and meta["architecture"] == "llama"
    loaded, tok = hf.load_model(tensors, config)
    ids = tokenizer(TEXT)["input_ids"]
    assert tok(TEXT, add_special_tokens=False)["input_ids"] == ids
    with torch.no_grad():
        assert torch.equal(loaded(torch.tensor([ids])).logits, model(torch.tensor([ids])).logits)


def test_a_quantised_gguf_is_dequantised_as_the_gguf_package_reads_it(tokenizer, tmp_path):
    import gguf

    model = tiny_llama(tokenizer, seed=4)
    path = tmp_path / "tiny-q8.gguf"
    write_llama_gguf(model, tokenizer, path, quantize="Q8_0")
    tensors, config = hf.gguf_to_registry(path)
    assert config["gguf"]["file_type"] == "MOSTLY_Q8_0" and config["gguf"]["tensor_types"].get("Q8_0", 0) > 0
    reader = gguf.GGUFReader(str(path))
    stored = {t.name: t for t in reader.tensors}["blk.0.ffn_down.weight"]
    want = torch.from_numpy(gguf.quants.dequantize(stored.data, stored.tensor_type).copy())
    got = tensors["model.layers.0.mlp.down_proj.weight"]
    assert torch.equal(got, want.reshape(got.shape))
    original = model.state_dict()["model.layers.0.mlp.down_proj.weight"]
    assert not torch.equal(got, original) and torch.allclose(got, original, atol=2e-3)  # really quantised
    loaded, _ = hf.load_model(tensors, config)
    ids = torch.tensor([tokenizer(TEXT)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, model(ids).logits, atol=5e-2)


def test_corrupt_and_unsupported_gguf_files_are_refused_naming_the_field(tokenizer, tmp_path):
    import gguf

    good = tmp_path / "good.gguf"
    write_llama_gguf(tiny_llama(tokenizer), tokenizer, good)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good.read_bytes()[:3000])
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\xff" * 200)
    for path in (cut, junk):
        with pytest.raises(InvalidArgument) as e:
            hf.gguf_to_registry(path, "params.artifact_id")
        assert e.value.violations[0].field == "params.artifact_id"
        assert "GGUF" in e.value.message
    odd = tmp_path / "odd.gguf"
    w = gguf.GGUFWriter(str(odd), "rwkv6")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", torch.zeros(4, 4).numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(InvalidArgument) as e:
        hf.gguf_to_registry(odd, "params.path")
    assert e.value.violations[0].field == "params.path" and "rwkv6" in e.value.message
