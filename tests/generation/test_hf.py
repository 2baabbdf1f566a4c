"""services.common.hf: Hugging Face directories <-> registry versions, safetensors only, never remote code."""
from __future__ import annotations

import io
import json
import tarfile

import pytest
import torch

from services.common import hf
from services.common.errors import InvalidArgument
from tests.generation.conftest import tiny_gpt2, tiny_llama


def _dir(model, tokenizer, path):
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_directory_round_trip_gives_the_same_model(tokenizer, tmp_path, family):
    model = (tiny_llama if family == "llama" else tiny_gpt2)(tokenizer, seed=3)
    tensors, config = hf.to_registry(hf.read_directory(_dir(model, tokenizer, tmp_path / "m")))
    assert config["format"] == hf.HF_FORMAT and config["model_type"] == family
    json.dumps(config)  # the version config is JSON (stored in PostgreSQL)
    loaded, tok = hf.load_model(tensors, config)
    ids = torch.tensor([tokenizer("record : key kafo value 1 2")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    assert tok("fact : the person")["input_ids"] == tokenizer("fact : the person")["input_ids"]


def test_archives_are_read(tokenizer, tmp_path):
    d = _dir(tiny_llama(tokenizer), tokenizer, tmp_path / "m")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        t.add(d, arcname="my-model")
    files = hf.read_archive(buf.getvalue())
    assert "config.json" in files and "model.safetensors" in files
    with pytest.raises(InvalidArgument) as e:
        hf.read_archive(b"not an archive at all")
    assert e.value.violations[0].field == "artifact_id"


def test_pickled_checkpoint_is_refused_with_a_clear_error(tokenizer, tmp_path):
    d = _dir(tiny_llama(tokenizer), tokenizer, tmp_path / "m")
    files = hf.read_directory(d)
    files.pop("model.safetensors")
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, buf)
    files["pytorch_model.bin"] = buf.getvalue()
    with pytest.raises(InvalidArgument) as e:
        hf.to_registry(files, "params.path")
    assert e.value.violations[0].field == "params.path"
    assert "pickled checkpoint 'pytorch_model.bin' refused" in e.value.message


def test_malformed_inputs_are_refused(tokenizer, tmp_path):
    files = hf.read_directory(_dir(tiny_llama(tokenizer), tokenizer, tmp_path / "m"))
    bad = dict(files, **{"model.safetensors": b"\x80\x04garbage"})
    with pytest.raises(InvalidArgument, match="not a valid safetensors"):
        hf.to_registry(bad)
    remote = dict(files, **{"config.json": json.dumps({**json.loads(files["config.json"]),
                                                        "auto_map": {"AutoModel": "x.Y"}}).encode()})
    with pytest.raises(InvalidArgument, match="remote code is never run"):
        hf.to_registry(remote)
    other = dict(files, **{"config.json": json.dumps({"model_type": "bert"}).encode()})
    with pytest.raises(InvalidArgument, match="not supported"):
        hf.to_registry(other)
    no_tok = {k: v for k, v in files.items() if not k.startswith("tokenizer")}
    with pytest.raises(InvalidArgument, match="no tokenizer"):
        hf.to_registry(no_tok)
    # tensors that do not fit config.json: refused when building (before anything would be registered)
    tensors, config = hf.to_registry(files)
    tensors = {k: v for k, v in tensors.items() if "layers.1." not in k}
    with pytest.raises(InvalidArgument, match="missing tensors"):
        hf.load_model(tensors, config)
