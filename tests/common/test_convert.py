"""services.common.convert: a model version answers with bounded config strings (a language model's config carries
its tokenizer files: Gemma's tokenizer.json is 33 MB, more than a gRPC message may hold)."""
from __future__ import annotations

import datetime
import uuid

from services.common import convert


def test_a_version_s_long_config_strings_are_answered_as_their_size():
    big = "x" * (convert.MAX_CONFIG_STRING + 1)
    row = {"id": uuid.uuid4(), "name": "lm", "version": 1, "kind": "hf-causal-lm", "metrics": {"loss": 1.0},
           "config": {"model_type": "llama", "tokenizer_files": {"tokenizer.json": big, "merges.txt": "a b"},
                      "layers": [big, 3]},
           "producing_job_id": None, "dataset_artifact_id": None,
           "created_at": datetime.datetime(2026, 12, 4, tzinfo=datetime.UTC)}
    v = convert.model_version(row, None, [], [])
    files = v.config["tokenizer_files"]
    assert files["tokenizer.json"] == f"<{len(big)} bytes, not returned>" and files["merges.txt"] == "a b"
    assert v.config["layers"][0] == f"<{len(big)} bytes, not returned>" and v.config["model_type"] == "llama"
    assert v.ByteSize() < 10_000
    assert row["config"]["tokenizer_files"]["tokenizer.json"] == big  # the stored config is untouched
