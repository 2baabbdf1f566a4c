"""Pickle-free (de)serialisation of nested training state (model/optimizer state_dicts, RNG, counters):
tensors go to safetensors, everything else to JSON."""
from __future__ import annotations

import json
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

_TENSOR = "__tensor__"


def pack_state(obj: Any) -> tuple[dict[str, torch.Tensor], Any]:
    """Split a nested structure of dicts/lists/tensors/scalars into (flat tensors, JSON skeleton)."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            key = f"t{len(tensors)}"
            tensors[key] = x.detach().cpu().clone()  # own storage: safetensors refuses shared tensors
            return {_TENSOR: key}
        if isinstance(x, dict):
            return {"__dict__": [[walk(k), walk(v)] for k, v in x.items()]}
        if isinstance(x, (list, tuple)):
            return {"__list__": [walk(v) for v in x], "tuple": isinstance(x, tuple)}
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        raise TypeError(f"cannot serialise {type(x).__name__} in job state")

    return tensors, walk(obj)


def unpack_state(tensors: dict[str, torch.Tensor], skeleton: Any) -> Any:
    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            if _TENSOR in x:
                return tensors[x[_TENSOR]]
            if "__dict__" in x:
                return {walk(k): walk(v) for k, v in x["__dict__"]}
            if "__list__" in x:
                items = [walk(v) for v in x["__list__"]]
                return tuple(items) if x.get("tuple") else items
        return x

    return walk(skeleton)


def dumps_state(obj: Any) -> bytes:
    """One blob: safetensors file whose metadata holds the JSON skeleton."""
    tensors, skeleton = pack_state(obj)
    return st_save(tensors, metadata={"skeleton": json.dumps(skeleton)})


def loads_state(blob: bytes) -> Any:
    tensors = st_load(blob)
    # safetensors.torch.load drops metadata; read it from the header.
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    skeleton = json.loads(header["__metadata__"]["skeleton"])
    return unpack_state(tensors, skeleton)
