"""Open Inference Protocol v2 answers that every client decodes. kserve fills a gRPC response's typed `contents`
unless told otherwise, and tritonclient reads only `raw_output_contents`: a gRPC answer here is always raw (kserve's
own InferenceGRPCClient reads raw too); over REST the caller's binary_data_output choice stands. The tensor specs a
predictor declares are both its model metadata (inputs/outputs with datatypes and shapes, -1 = variable) and the
shapes its outputs are built with."""
from __future__ import annotations

from dataclasses import dataclass

from kserve.protocol.infer_type import InferRequest, InferResponse


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]  # -1: variable

    def as_metadata(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


def response(payload: InferRequest, **kwargs) -> InferResponse:
    """An InferResponse whose outputs go as raw bytes over gRPC (and as the caller asked over REST)."""
    raw = bool(getattr(payload, "from_grpc", False)) or bool(payload.use_binary_outputs)
    return InferResponse(use_binary_outputs=raw, **kwargs)
