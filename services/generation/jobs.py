"""The generation service's long jobs (written against services.common.jobcontext.JobContext).

- run_import(ctx): a Hugging Face causal-LM directory (local path under an allowed root, or an uploaded archive) or
  a GGUF file (a local .gguf path, or an uploaded GGUF artifact, told by its magic bytes) -> one registry version. The model is built once with transformers before anything is registered, so a malformed
  or pickled upload fails the job with a clear error and stores nothing.
- run_training(ctx): BPE tokenizer + small Llama from scratch (services.generation.training), resumable steps."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from services.common import hf
from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext, run_steps
from services.common.params import parse_params
from services.generation.params import ImportParams, TrainParams


def import_roots(ctx: JobContext) -> list[Path]:
    """The folders a local import may read (settings.generation.import_roots of the worker)."""
    from services.common.spec import service_settings
    from services.generation.settings import GenerationConfig

    cfg = service_settings(ctx.settings, "generation", GenerationConfig)
    return [Path(r).resolve() for r in cfg.import_roots]


def check_local_path(path: str, roots: list[Path], field: str = "params.path") -> Path:
    if not path or "\x00" in path:
        raise InvalidArgument(field, "a directory path is required")
    p = Path(path).resolve()
    if not roots:
        raise InvalidArgument(field, "importing from local paths is disabled on this deployment "
                              "(settings generation.import_roots); upload an archive instead")
    if not any(p == r or r in p.parents for r in roots):
        raise InvalidArgument(field, f"{path!r} is outside the allowed import roots")
    return p


def run_import(ctx: JobContext) -> dict:
    p = parse_params(ImportParams, ctx.params, prefix="params.")
    ctx.progress(0.05, "reading the model")
    if p.path is not None:
        field, source = "params.path", f"path:{os.path.basename(p.path.rstrip('/'))}"
        local = check_local_path(p.path, import_roots(ctx))
        if local.is_file():
            with open(local, "rb") as f:
                if not hf.is_gguf(f.read(4)):
                    raise InvalidArgument(field, "a model file must be GGUF; a Hugging Face model is a directory")
            ctx.progress(0.1, "dequantising the GGUF file with transformers")
            tensors, config = hf.gguf_to_registry(local, field)
        else:
            tensors, config = hf.to_registry(hf.read_directory(local, field), field)
    else:
        field, source = "params.artifact_id", f"artifact:{p.artifact_id}"
        data = ctx.read_artifact(p.artifact_id)
        if hf.is_gguf(data):
            ctx.progress(0.1, "dequantising the GGUF file with transformers")
            with tempfile.NamedTemporaryFile(prefix="praxon-", suffix=".gguf") as f:
                f.write(data)
                f.flush()
                del data
                tensors, config = hf.gguf_to_registry(f.name, field)
        else:
            tensors, config = hf.to_registry(hf.read_archive(data, field), field)
    ctx.check_cancelled()
    ctx.progress(0.5, "building the model with transformers")
    model, tokenizer = hf.load_model(tensors, config, field=field)  # proves it loads before registering
    n_params = sum(t.numel() for t in model.parameters())
    config["source"] = source
    metrics = {"parameters": float(n_params), "vocab_size": float(len(tokenizer)),
               "layers": float(model.config.num_hidden_layers)}
    del model
    ctx.check_cancelled()
    info = ctx.register_model(p.model_name, tensors, kind=hf.REGISTRY_KIND, config=config, metrics=metrics,
                              dataset_artifact_id=p.artifact_id)
    ctx.progress(1.0, "model registered", parameters=float(n_params))
    result = {"model_version_id": info.model_version_id, "model_name": info.name, "model_type": config["model_type"],
              "parameters": n_params}
    if "gguf" in config:
        result.update(gguf_sha256=config["gguf"]["sha256"], gguf_file_type=config["gguf"]["file_type"])
    return result


def run_training(ctx: JobContext) -> dict:
    from services.generation.training import LanguageModelTraining

    p = parse_params(TrainParams, ctx.params, prefix="params.")
    job = LanguageModelTraining(p)
    return run_steps(ctx, job, checkpoint_every=p.steps_per_checkpoint,
                     message=lambda done, total: f"step {done}/{total}", progress_span=(0.0, 0.99))
