"""Job parameters of the generation service (one model per job kind; the servicer and the job validate with it)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from services.common.params import JobParams, ModelName


class TrainParams(JobParams):
    """generation.train: a BPE tokenizer and a small Llama-type model trained from scratch."""

    model_config = JobParams.model_config

    model_name: ModelName = "tiny-llama"
    corpus_artifact_id: str | None = None   # UTF-8 text (one document per line) or JSONL ({"text": ...}); else builtin
    builtin_retrieval_docs: int = Field(2000, ge=0, le=200_000)
    builtin_min_records: int = Field(2, ge=1, le=200)
    builtin_max_records: int = Field(12, ge=2, le=200)
    builtin_lookups: int = Field(3, ge=1, le=200)   # lookups per record document (at most its record count)
    # "records": only the key-value record documents (no facts, passkey or multi-document text), so the whole
    # budget goes to the lookup (benchmarks/generation/kv_retrieval.py)
    builtin_tasks: Literal["all", "records"] = "all"
    # copy documents in the built-in corpus, and how many first steps train on them alone: a curriculum that teaches
    # the copying step of the lookup first (corpus.copy_document; benchmarks/generation/RESULTS.md)
    builtin_copy_docs: int = Field(0, ge=0, le=200_000)
    builtin_value_words: int = Field(1, ge=1, le=4)   # words per record value (corpus._records)
    copy_warmup_steps: int = Field(0, ge=0, le=1_000_000)
    vocab_size: int = Field(512, ge=300, le=65_536)
    hidden_size: int = Field(64, ge=16, le=2048)
    num_layers: int = Field(2, ge=1, le=48)
    num_heads: int = Field(4, ge=1, le=64)
    num_kv_heads: int = Field(0, ge=0, le=64)   # 0: = num_heads
    max_seq_len: int = Field(256, ge=16, le=8192)
    # std of the initial weights (transformers' default 0.02 is sized for wide models; at width 64 it starts the
    # attention logits near 0, and q and k scale each other's gradients; 64 ** -0.5 is the fan-in scale)
    init_std: float = Field(0.02, gt=0, le=1.0)
    steps: int = Field(600, ge=1, le=1_000_000)
    batch_size: int = Field(16, ge=1, le=1024)
    lr: float = Field(3e-3, gt=0, le=1.0)
    weight_decay: float = Field(0.01, ge=0, le=1.0)
    warmup_steps: int = Field(30, ge=0, le=1_000_000)
    steps_per_checkpoint: int = Field(50, ge=1, le=1_000_000)
    validation_fraction: float = Field(0.05, gt=0, lt=0.5)
    seed: int = Field(0, ge=0, le=2 ** 31 - 1)

    @field_validator("builtin_max_records")
    @classmethod
    def _records(cls, v: int, info: ValidationInfo) -> int:
        if v < info.data.get("builtin_min_records", 1):
            raise ValueError("must be >= builtin_min_records")
        return v

    @field_validator("copy_warmup_steps")
    @classmethod
    def _copy_warmup(cls, v: int, info: ValidationInfo) -> int:
        if v and not info.data.get("builtin_copy_docs"):
            raise ValueError("needs builtin_copy_docs > 0 (the warm-up trains on the copy documents alone)")
        return v

    @field_validator("num_heads")
    @classmethod
    def _heads(cls, v: int, info: ValidationInfo) -> int:
        if "hidden_size" in info.data and info.data["hidden_size"] % v:
            raise ValueError("hidden_size must be a multiple of num_heads")
        return v

    @field_validator("num_kv_heads")
    @classmethod
    def _kv_heads(cls, v: int, info: ValidationInfo) -> int:
        if v and "num_heads" in info.data and info.data["num_heads"] % v:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        return v


class ImportParams(JobParams):
    """generation.import: a Hugging Face causal-LM directory from a local path (under an allowed root) or an
    uploaded archive artifact (.tar, .tar.gz, .zip)."""

    model_config = JobParams.model_config

    model_name: ModelName
    path: str | None = None
    artifact_id: str | None = Field(None, validate_default=True)

    @field_validator("artifact_id")
    @classmethod
    def _one_source(cls, v: str | None, info: ValidationInfo) -> str | None:
        if (info.data.get("path") is None) == (v is None):
            raise ValueError("give exactly one of path or artifact_id")
        return v


Policy = Literal["none", "vl_cache", "h2o", "streaming_llm"]


class NLITrainParams(JobParams):
    """generation.nli_train: the MiniLM NLI head (a stand-in for DeBERTa-MNLI) trained on generated pairs
    (services.generation.nli.make_pairs)."""

    model_config = JobParams.model_config

    model_name: ModelName = "nli-minilm"
    train_pairs: int = Field(6000, ge=8, le=1_000_000)
    heldout_pairs: int = Field(900, ge=4, le=100_000)
    steps: int = Field(400, ge=1, le=1_000_000)
    batch_size: int = Field(32, ge=1, le=1024)
    lr: float = Field(5e-5, gt=0, le=1.0)
    max_tokens: int = Field(96, ge=8, le=512)
    steps_per_checkpoint: int = Field(50, ge=1, le=1_000_000)
    seed: int = Field(0, ge=0, le=2 ** 31 - 1)


class NLIImportParams(ImportParams):
    """generation.nli_import: a Hugging Face sequence-classification NLI checkpoint (e.g. DeBERTa-MNLI) from a local
    path (under an allowed root) or an uploaded archive artifact (the same sources as ImportParams)."""


class IndexParams(JobParams):
    """generation.index: chunk and embed the documents StartIndexingJob stored with this job."""

    model_config = JobParams.model_config

    collection_id: str
    documents: int = Field(0, ge=0, le=1_000_000)
    chunk_chars: int = Field(800, ge=50, le=20_000)
    overlap_chars: int = Field(100, ge=0, le=5_000)

    @field_validator("overlap_chars")
    @classmethod
    def _overlap(cls, v: int, info: ValidationInfo) -> int:
        if v >= info.data.get("chunk_chars", 800) // 2:
            raise ValueError("must be < chunk_chars / 2")
        return v


class SearchParams(JobParams):
    """RetrievalService.Search."""

    model_config = JobParams.model_config

    query: str = Field(min_length=1, max_length=8_000)
    k: int = Field(10, ge=1, le=100)


class AnswerParams(JobParams):
    """RetrievalService.AnswerWithRetrieval."""

    model_config = JobParams.model_config

    question: str = Field(min_length=1, max_length=4_000)
    method: Literal["standard", "speculative", "sparse"] = "standard"
    k: int = Field(10, ge=1, le=50)
    drafts: int = Field(5, ge=1, le=16)
    clusters: int = Field(2, ge=1, le=10)
    relevance_threshold: float = Field(0.5, ge=0.0, le=1.0)
    max_new_tokens: int = Field(32, ge=1, le=256)
    seed: int = Field(0, ge=0, le=2 ** 62)

    @field_validator("question")
    @classmethod
    def _blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v
