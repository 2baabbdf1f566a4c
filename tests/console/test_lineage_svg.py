"""The lineage drawing on its own: a version sits one column right of its deepest parent, datasets in the first
column, an unlearning record labels only the edge from its source version to its new one; and the sign-in page's
`next` never leads off the console."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from praxon.common.v1 import common_pb2
from praxon.models.v1 import models_pb2
from praxon.unlearning.v1 import unlearning_pb2
from services.console.app import _safe_next
from services.console.lineage import lineage_svg

SVG = "{http://www.w3.org/2000/svg}"


def _version(vid, version, parents=(), dataset=""):
    return models_pb2.ModelVersion(id=vid, name="head", version=version, kind="softmax_l2",
                                   parent_version_ids=list(parents), dataset_artifact_id=dataset)


def _boxes(root) -> dict[str, tuple[float, float]]:
    return {a.get("data-node"): (float(a.find(f"{SVG}rect").get("x")), float(a.find(f"{SVG}rect").get("y")))
            for a in root.iter(f"{SVG}a") if a.get("data-node")}


def test_columns_follow_generations_and_the_record_labels_its_edge():
    versions = [_version("v3", 3, ["v2"]), _version("v1", 1, dataset="ds"), _version("v2", 2, ["v1"]),
                _version("v4", 4, ["v1"], dataset="ds")]
    datasets = [common_pb2.ArtifactRef(id="ds", name="train.safetensors")]
    record = unlearning_pb2.UnlearningRecord(id="rec1", source_model_version_id="v1", new_model_version_id="v2",
                                             method=unlearning_pb2.METHOD_CERTIFIED_NOISY_MINIMIZER)
    root = ET.fromstring(lineage_svg(versions, datasets, [record]))
    boxes = _boxes(root)
    assert set(boxes) == {"version-head-1", "version-head-2", "version-head-3", "version-head-4", "dataset-ds"}
    x = {k: v[0] for k, v in boxes.items()}
    assert x["dataset-ds"] < x["version-head-1"] < x["version-head-2"] == x["version-head-4"] < x["version-head-3"]
    edges = {g.get("class"): [] for g in root.iter(f"{SVG}g")}
    for g in root.iter(f"{SVG}g"):
        edges[g.get("class")].append("".join(g.itertext()))
    assert edges["edge unlearn"] == ["unlearned: certified noisy minimizer"]  # v1 -> v2 only
    assert sorted(edges["edge parent"]) == ["parent", "parent"]  # v2 -> v3, v1 -> v4
    assert edges["edge dataset"] == ["trained on", "trained on"]  # ds -> v1, ds -> v4
    assert [a.get("href") for a in root.iter(f"{SVG}a") if a.get("href", "").startswith("/unlearning/")] == \
        ["/unlearning/rec1"]


def test_names_are_escaped():
    v = models_pb2.ModelVersion(id="x", name='<script>"', version=1, kind="k")
    svg = lineage_svg([v], [], [])
    assert "<script>" not in svg and ET.fromstring(svg) is not None


def test_sign_in_returns_only_to_a_page_of_the_console():
    assert _safe_next("/models/head?x=1") == "/models/head?x=1"
    for target in ("https://evil.example/", "//evil.example/", "/\\evil.example", "", None, "jobs"):
        assert _safe_next(target) == "/jobs", target
