"""Hugging Face causal-LM directories as registry model versions (shared by generation and unlearning).

A directory (config.json, tokenizer files, *.safetensors, optionally sharded with model.safetensors.index.json)
becomes one registry version: the weights are the merged safetensors tensors (the registry stores them as one
safetensors artifact), the version's config holds {"format": HF_FORMAT, "model_type", "hf_config" (config.json),
"generation_config", "tokenizer_files" {name: text}}. Loading writes the directory back to a temporary folder and
calls transformers' own `from_pretrained` with `use_safetensors=True` and `trust_remote_code=False`, so the model is
exactly what transformers would build from the original directory.

A GGUF file (llama.cpp's format, quantised or not) is read with transformers' own GGUF loader, dequantised to
float32 and registered the same way (gguf_to_registry); its sha256, quantisation type and GGUF metadata go into the
version config under "gguf". Architectures transformers cannot read from GGUF, or reads as a family the engine does
not serve, are refused with a clear error before anything is stored.

Never unpickles: pickled checkpoints (pytorch_model.bin, *.pt, *.pth, *.ckpt, *.pkl) are refused with a clear error
when they are the only weights (and ignored when safetensors sit beside them); a config that asks for remote code
(auto_map) is refused; only the model families in FAMILIES are accepted."""
from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from services.common.errors import InvalidArgument

HF_FORMAT = "praxon.hf-causal-lm/v1"
REGISTRY_KIND = "hf-causal-lm"
# model_type -> the transformers class built for it (explicit: no auto class can pull remote code)
FAMILIES = {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel", "gemma3_text": "Gemma3ForCausalLM"}
GGUF_MAGIC = b"GGUF"
# Gemma's turn format (the GGUF of the pretrained base model carries no chat template; instruction-tuned Gemma
# checkpoints use these turns, and the base model has the turn tokens in its vocabulary). A system message is put
# at the start of the first user turn, as Gemma has no system role.
GEMMA_CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set system = messages[0]['content'] + '\\n\\n' -%}{%- set messages = messages[1:] -%}"
    "{%- else -%}{%- set system = '' -%}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{- '<start_of_turn>' + role + '\\n' + (system if loop.first else '') + message['content'] | trim"
    " + '<end_of_turn>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}")
# model_type -> (chat template, extra end-of-turn tokens) for GGUF files that carry none
GGUF_CHAT_DEFAULTS = {"gemma3_text": (GEMMA_CHAT_TEMPLATE, ["<end_of_turn>"])}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
TEXT_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
              "added_tokens.json", "chat_template.jinja")
MAX_TEXT_BYTES = 32 * 1024 * 1024
MAX_FILES = 256


def read_directory(path: str | os.PathLike, field: str = "path") -> dict[str, bytes]:
    """The top-level files of a model directory (name -> bytes). Subfolders are ignored."""
    p = Path(path)
    if not p.is_dir():
        raise InvalidArgument(field, f"{str(path)!r} is not a directory")
    files = {}
    for f in sorted(p.iterdir()):
        if f.is_file() and not f.name.startswith("."):
            files[f.name] = f.read_bytes()
        if len(files) > MAX_FILES:
            raise InvalidArgument(field, f"more than {MAX_FILES} files")
    return files


def read_archive(data: bytes, field: str = "artifact_id") -> dict[str, bytes]:
    """A model directory uploaded as a .tar, .tar.gz or .zip archive (files may sit under one top folder)."""
    files: dict[str, bytes] = {}

    def add(name: str, blob: bytes) -> None:
        base = name.replace("\\", "/").rstrip("/").split("/")[-1]
        if not base or base.startswith(".") or base in ("..",):
            return
        if base in files:
            raise InvalidArgument(field, f"the archive holds two files named {base!r}")
        files[base] = blob
        if len(files) > MAX_FILES:
            raise InvalidArgument(field, f"more than {MAX_FILES} files in the archive")

    if data[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                for info in z.infolist():
                    if not info.is_dir():
                        add(info.filename, z.read(info))
        except zipfile.BadZipFile as exc:
            raise InvalidArgument(field, f"not a readable zip archive: {exc}") from None
    else:
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as t:
                for m in t.getmembers():
                    if m.isfile():
                        fh = t.extractfile(m)
                        if fh is not None:
                            add(m.name, fh.read())
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise InvalidArgument(field, "expected a .tar, .tar.gz or .zip archive of a Hugging Face model "
                                  f"directory: {exc}") from None
    return files


def _json(files: Mapping[str, bytes], name: str, field: str) -> dict[str, Any]:
    try:
        value = json.loads(files[name].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgument(field, f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(field, f"{name} must hold a JSON object")
    return value


def _load_safetensors(blob: bytes, name: str, field: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load

    try:
        return load(blob)
    except Exception as exc:  # noqa: BLE001 - any parse failure is the upload's fault
        raise InvalidArgument(field, f"{name} is not a valid safetensors file: {str(exc)[:200]}") from None


def to_registry(files: Mapping[str, bytes], field: str = "path") -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Validate a model directory's files and turn them into (tensors, version config). Raises InvalidArgument
    (naming `field`) for anything that is not a safetensors causal LM of a supported family."""
    if "config.json" not in files:
        raise InvalidArgument(field, "no config.json: not a Hugging Face model directory")
    hf_config = _json(files, "config.json", field)
    if hf_config.get("auto_map"):
        raise InvalidArgument(field, "config.json asks for custom model code (auto_map); remote code is never run")
    model_type = hf_config.get("model_type")
    if model_type not in FAMILIES:
        raise InvalidArgument(field, f"model_type {model_type!r} is not supported (supported: "
                              f"{', '.join(sorted(FAMILIES))})")
    shards = sorted(n for n in files if n.endswith(".safetensors"))
    pickles = sorted(n for n in files if n.endswith(PICKLE_SUFFIXES))
    if not shards:
        if pickles:
            raise InvalidArgument(field, f"pickled checkpoint {pickles[0]!r} refused: pickles can run code when "
                                  "loaded; convert the weights to safetensors (save_pretrained(..., "
                                  "safe_serialization=True)) and upload again")
        raise InvalidArgument(field, "no *.safetensors weights in the model directory")
    if "model.safetensors.index.json" in files:
        index = _json(files, "model.safetensors.index.json", field)
        wanted = sorted(set((index.get("weight_map") or {}).values()))
        missing = [s for s in wanted if s not in files]
        if missing:
            raise InvalidArgument(field, f"the shard index names {missing[0]!r}, which is missing")
        shards = wanted
    tensors: dict[str, torch.Tensor] = {}
    for name in shards:
        for k, v in _load_safetensors(files[name], name, field).items():
            if k in tensors:
                raise InvalidArgument(field, f"tensor {k!r} appears in two shards")
            tensors[k] = v
    if not tensors:
        raise InvalidArgument(field, "the safetensors files hold no tensors")
    tok_files = {}
    for name in TEXT_FILES:
        if name in files:
            if len(files[name]) > MAX_TEXT_BYTES:
                raise InvalidArgument(field, f"{name} is larger than {MAX_TEXT_BYTES} bytes")
            try:
                tok_files[name] = files[name].decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidArgument(field, f"{name} is not UTF-8 text") from None
    if "tokenizer.json" not in tok_files and not {"vocab.json", "merges.txt"} <= set(tok_files):
        raise InvalidArgument(field, "no tokenizer: expected tokenizer.json (or vocab.json + merges.txt)")
    config = {"format": HF_FORMAT, "model_type": model_type, "architecture": FAMILIES[model_type],
              "hf_config": hf_config, "tokenizer_files": tok_files,
              "generation_config": _json(files, "generation_config.json", field)
              if "generation_config.json" in files else {}}
    return tensors, config


def write_directory(tensors: Mapping[str, torch.Tensor], config: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write a registry version back as a Hugging Face directory (model.safetensors, config.json, tokenizer)."""
    from safetensors.torch import save_file

    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(p / "model.safetensors"), metadata={"format": "pt"})
    (p / "config.json").write_text(json.dumps(config["hf_config"]))
    if config.get("generation_config"):
        (p / "generation_config.json").write_text(json.dumps(config["generation_config"]))
    for name, text in (config.get("tokenizer_files") or {}).items():
        if name in TEXT_FILES:
            (p / name).write_text(text)
    return p


def check_version_config(config: Mapping[str, Any], field: str = "model") -> None:
    if config.get("format") != HF_FORMAT:
        from services.common.errors import FailedPrecondition

        raise FailedPrecondition(f"this model version is not a Hugging Face causal LM (format "
                                 f"{config.get('format')!r}); register one with StartImportLanguageModelJob or "
                                 "StartLanguageModelTrainingJob", reason="NOT_A_LANGUAGE_MODEL",
                                 metadata={"field": field})


def load_model(tensors: Mapping[str, torch.Tensor], config: Mapping[str, Any], *,
               dtype: torch.dtype = torch.float32, field: str = "model"):
    """(model in eval mode, tokenizer) from a registry version, through transformers' from_pretrained
    (safetensors only, never remote code)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_version_config(config, field)
    if config.get("model_type") not in FAMILIES or (config.get("hf_config") or {}).get("auto_map"):
        raise InvalidArgument(field, "unsupported model family")
    with tempfile.TemporaryDirectory(prefix="praxon-hf-") as tmp:
        write_directory(tensors, config, tmp)
        model, info = AutoModelForCausalLM.from_pretrained(tmp, use_safetensors=True, trust_remote_code=False,
                                                           dtype=dtype, output_loading_info=True)
        tokenizer = AutoTokenizer.from_pretrained(tmp, trust_remote_code=False)
    problems = [f"unexpected tensors {sorted(info.get('unexpected_keys') or [])[:3]}"
                if info.get("unexpected_keys") else "",
                f"missing tensors {sorted(info.get('missing_keys') or [])[:3]}" if info.get("missing_keys") else "",
                f"mismatched shapes {[m[0] for m in info.get('mismatched_keys') or []][:3]}"
                if info.get("mismatched_keys") else ""]
    problems = [p for p in problems if p]
    if problems:
        raise InvalidArgument(field, "weights do not match config.json: " + "; ".join(problems))
    model.eval()
    return model, tokenizer


def from_pretrained_objects(model, tokenizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, version config) of an in-memory transformers model + tokenizer (via save_pretrained, which drops
    tied duplicates and writes safetensors)."""
    with tempfile.TemporaryDirectory(prefix="praxon-hf-") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        return to_registry(read_directory(tmp), "model")


def is_gguf(head: bytes) -> bool:
    return head[:4] == GGUF_MAGIC


def _sha256_file(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def gguf_metadata(path: str | os.PathLike, field: str = "path") -> dict[str, Any]:
    """{"architecture", "name", "file_type", "tensor_types"} of a GGUF file (read with the gguf package, which maps
    the file and reads only its header). InvalidArgument (naming `field`) when it is not a readable GGUF file."""
    from collections import Counter

    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
        fields = reader.fields

        def value(key: str):
            f = fields.get(key)
            return f.contents() if f is not None else None

        arch = value("general.architecture")
        file_type = value("general.file_type")
        types = Counter(t.tensor_type.name for t in reader.tensors)
    except Exception as exc:  # noqa: BLE001 - any parse failure is the file's fault
        raise InvalidArgument(field, f"not a readable GGUF file: {str(exc)[:200]}") from None
    if not arch:
        raise InvalidArgument(field, "the GGUF file names no general.architecture")
    try:
        ftype = gguf.LlamaFileType(int(file_type)).name if file_type is not None else "unknown"
    except ValueError:
        ftype = f"file_type {file_type}"
    return {"architecture": str(arch), "name": str(value("general.name") or ""), "file_type": ftype,
            "tensor_types": dict(sorted(types.items()))}


def gguf_to_registry(path: str | os.PathLike, field: str = "path") -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A GGUF file -> (tensors, version config), through transformers' GGUF loader (dequantised to float32). The
    config records the file's sha256, quantisation type and tensor types under "gguf"."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = Path(path)
    meta = gguf_metadata(src, field)
    meta["sha256"] = _sha256_file(src)
    with tempfile.TemporaryDirectory(prefix="praxon-gguf-") as tmp:
        # a folder holding only the file, so transformers reads nothing else beside it
        (Path(tmp) / "model.gguf").symlink_to(src.resolve())
        try:
            model = AutoModelForCausalLM.from_pretrained(tmp, gguf_file="model.gguf", dtype=torch.float32,
                                                         trust_remote_code=False)
            tokenizer = AutoTokenizer.from_pretrained(tmp, gguf_file="model.gguf", trust_remote_code=False)
        except Exception as exc:  # noqa: BLE001 - transformers' GGUF loader raises many types for a file it can't read
            raise InvalidArgument(field, f"transformers cannot load this GGUF file (architecture "
                                  f"{meta['architecture']!r}): {str(exc)[:300]}") from None
    model_type = getattr(model.config, "model_type", None)
    if model_type not in FAMILIES:
        raise InvalidArgument(field, f"the GGUF file holds a {model_type!r} model, which is not supported "
                              f"(supported: {', '.join(sorted(FAMILIES))})")
    # loaded from GGUF, transformers keeps a quantisation config that save_pretrained refuses; the weights are
    # already dequantised
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    template, end_tokens = GGUF_CHAT_DEFAULTS.get(model_type, (None, []))
    if template and not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = template
        meta["chat_template"] = "praxon default for " + model_type
    eos = model.generation_config.eos_token_id
    eos = list(eos) if isinstance(eos, (list, tuple)) else ([eos] if eos is not None else [])
    for t in end_tokens:
        i = tokenizer.convert_tokens_to_ids(t)
        if isinstance(i, int) and i != tokenizer.unk_token_id and i not in eos:
            eos.append(i)
    model.generation_config.eos_token_id = eos if len(eos) != 1 else eos[0]
    tensors, config = from_pretrained_objects(model, tokenizer)
    config["gguf"] = meta
    return tensors, config
