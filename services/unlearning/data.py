"""The training-data artifact format the unlearning jobs read, and forget-set parsing.

Dataset artifact (content type `application/vnd.praxon.dataset+safetensors`): one safetensors file with
  X           float [n, D]   features (for a guard head: the frozen encoder's embeddings)
  y           int64 [n] class labels (logreg_l2: 0/1, softmax_l2: 0..C-1) or float [n] targets (ridge_l2)
  record_ids  int64 [n]      optional; or the metadata key "record_ids" holding a JSON list of strings
metadata (all optional): "num_classes", "description". Record ids are compared as strings and must be unique;
without any record ids the row index ("0".."n-1") is the id.

Forget-set artifact: JSON, either a list of record ids or {"record_ids": [...]}.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from services.common.errors import InvalidArgument

if TYPE_CHECKING:
    from services.common.jobcontext import JobContext

DATASET_CONTENT_TYPE = "application/vnd.praxon.dataset+safetensors"


@dataclass
class Dataset:
    X: torch.Tensor
    y: torch.Tensor
    record_ids: list[str]
    metadata: dict[str, str] = field(default_factory=dict)
    _index: dict[str, int] | None = None

    def __len__(self) -> int:
        return self.X.shape[0]

    @property
    def index(self) -> dict[str, int]:
        if self._index is None:
            self._index = {r: i for i, r in enumerate(self.record_ids)}
        return self._index

    def without(self, record_ids: set[str] | list[str]) -> tuple[Dataset, list[str]]:
        """This dataset minus the given records (tombstoned ones), and the ids actually dropped, in row order."""
        gone = set(record_ids)
        if not gone:
            return self, []
        keep = [i for i, r in enumerate(self.record_ids) if r not in gone]
        if len(keep) == len(self.record_ids):
            return self, []
        dropped = [r for r in self.record_ids if r in gone]
        idx = torch.tensor(keep, dtype=torch.long)
        return Dataset(X=self.X[idx], y=self.y[idx], record_ids=[self.record_ids[i] for i in keep],
                       metadata=dict(self.metadata)), dropped

    def fingerprint(self) -> str:
        """sha256 of the record ids in row order: which records a reader yielded."""
        return hashlib.sha256("\n".join(self.record_ids).encode()).hexdigest()

    def split(self, forget_ids: list[str], *, field_name: str = "forget_record_ids",
              excluded: list[str] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Boolean masks (retain, forget). Unknown ids -> InvalidArgument on `field_name`; ids excluded
        earlier (already forgotten) are neither retained nor forgotten again."""
        idx = self.index
        unknown = [r for r in forget_ids if r not in idx]
        if unknown:
            shown = ", ".join(unknown[:5]) + (f" (+{len(unknown) - 5} more)" if len(unknown) > 5 else "")
            raise InvalidArgument(field_name, f"unknown record ids: {shown}")
        forget = torch.zeros(len(self), dtype=torch.bool)
        forget[[idx[r] for r in forget_ids]] = True
        gone = torch.zeros(len(self), dtype=torch.bool)
        for r in excluded or []:
            if r in idx:
                gone[idx[r]] = True
        already = forget & gone
        if bool(already.any()):
            raise InvalidArgument(field_name, f"{int(already.sum())} record ids were already forgotten by an "
                                              "earlier version of this model")
        return ~(forget | gone), forget


def encode_dataset(X: torch.Tensor, y: torch.Tensor, record_ids: list[str] | None = None,
                   metadata: dict[str, str] | None = None) -> bytes:
    tensors = {"X": X.contiguous(), "y": y.contiguous()}
    meta = dict(metadata or {})
    if record_ids is not None:
        if len(record_ids) != X.shape[0]:
            raise ValueError("one record id per row")
        meta["record_ids"] = json.dumps([str(r) for r in record_ids])
    return st_save(tensors, metadata=meta or None)


def decode_dataset(blob: bytes, *, field_name: str = "dataset_artifact_id") -> Dataset:
    try:
        tensors = st_load(blob)
        n = int.from_bytes(blob[:8], "little")
        header = json.loads(blob[8:8 + n])
    except (SafetensorError, ValueError, UnicodeDecodeError) as e:
        raise InvalidArgument(field_name, f"not a safetensors dataset: {e}") from None
    meta = dict(header.get("__metadata__") or {})
    if "X" not in tensors or "y" not in tensors:
        raise InvalidArgument(field_name, "dataset must hold tensors 'X' [n, D] and 'y' [n]")
    X, y = tensors["X"], tensors["y"]
    if X.ndim != 2 or y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise InvalidArgument(field_name, f"bad shapes X{list(X.shape)} y{list(y.shape)}")
    if not bool(torch.isfinite(X.to(torch.float64)).all()):
        raise InvalidArgument(field_name, "features contain NaN or inf")
    if "record_ids" in tensors:
        ids = [str(int(v)) for v in tensors["record_ids"].reshape(-1).tolist()]
    elif "record_ids" in meta:
        try:
            ids = [str(v) for v in json.loads(meta.pop("record_ids"))]
        except ValueError:
            raise InvalidArgument(field_name, "metadata record_ids is not a JSON list") from None
    else:
        ids = [str(i) for i in range(X.shape[0])]
    meta.pop("record_ids", None)
    if len(ids) != X.shape[0]:
        raise InvalidArgument(field_name, "one record id per row is required")
    if len(set(ids)) != len(ids):
        raise InvalidArgument(field_name, "record ids must be unique")
    return Dataset(X=X, y=y, record_ids=ids, metadata=meta)


def parse_forget_ids(value, *, field_name: str = "forget_record_ids") -> list[str]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidArgument(field_name, "must be a list of record ids")
    ids = [str(v) for v in value]
    if not ids:
        raise InvalidArgument(field_name, "must name at least one record")
    if len(set(ids)) != len(ids):
        raise InvalidArgument(field_name, "record ids must be unique")
    return ids


def decode_forget_set(blob: bytes, *, field_name: str = "forget_set_artifact_id") -> list[str]:
    try:
        obj = json.loads(blob)
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument(field_name, "forget set artifact must be JSON") from None
    if isinstance(obj, dict):
        obj = obj.get("record_ids")
    if not isinstance(obj, list):
        raise InvalidArgument(field_name, "expected a JSON list of record ids or {\"record_ids\": [...]}")
    return parse_forget_ids(obj, field_name=field_name)


def read_dataset(ctx: JobContext, artifact_id: str, field: str = "dataset_artifact_id") -> tuple[Dataset, list[str]]:
    """THE dataset reader of the unlearning jobs (every job reads data through it): decodes the artifact and
    drops every record a succeeded unlearning job tombstoned (ctx.forgotten_records), so deleted data never
    comes back into training, unlearning or audits. Returns the dataset and the ids it dropped."""
    ds = decode_dataset(ctx.read_artifact(artifact_id), field_name=field)
    return ds.without(ctx.forgotten_records(artifact_id))
