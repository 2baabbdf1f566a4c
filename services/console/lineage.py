"""A model's lineage as an inline SVG drawn on the server: model versions and the datasets they were trained on as
boxes, an arrow from each parent version (and dataset) to what came from it, and the unlearning record that made a
version written on its edge. Columns are generations (a version sits one column right of its deepest parent);
there is no crossing minimisation: lineages here are short chains and small trees."""
from __future__ import annotations

from html import escape
from urllib.parse import quote

BOX_W, BOX_H, COL_W, ROW_H, PAD = 230, 50, 480, 86, 20  # the gap between columns holds an edge's label


def lineage_svg(versions: list, datasets: list, records: list) -> str:
    """versions: ModelVersion messages (any order, no duplicates); datasets: ArtifactRef messages; records:
    UnlearningRecord messages (those whose new version is drawn label its edge). Returns the <svg> element."""
    by_id = {v.id: v for v in versions}
    depth: dict[str, int] = {}

    def depth_of(vid: str, seen: frozenset = frozenset()) -> int:
        if vid not in depth:
            parents = [p for p in by_id[vid].parent_version_ids if p in by_id and p not in seen]
            depth[vid] = 1 + max((depth_of(p, seen | {vid}) for p in parents), default=-1)
        return depth[vid]

    used_datasets = {v.dataset_artifact_id for v in versions if v.dataset_artifact_id}
    datasets = [d for d in {d.id: d for d in datasets}.values() if d.id in used_datasets]
    shift = 1 if datasets else 0
    columns: dict[int, list[str]] = {}
    for v in sorted(versions, key=lambda v: (v.name, v.version)):
        columns.setdefault(depth_of(v.id) + shift, []).append(v.id)
    if datasets:
        columns[0] = [f"ds:{d.id}" for d in datasets]
    pos = {node: (PAD + col * COL_W, PAD + row * ROW_H) for col, nodes in columns.items()
           for row, node in enumerate(nodes)}
    made_by = {r.new_model_version_id: r for r in records if r.new_model_version_id}

    edges, boxes = [], []
    for v in versions:
        x, y = pos[v.id]
        for p in v.parent_version_ids:
            if p in pos:
                record = made_by.get(v.id) if made_by.get(v.id) and made_by[v.id].source_model_version_id == p \
                    else None
                label = f"unlearned: {method_name(record.method)}" if record else "parent"
                href = f"/unlearning/{record.id}" if record else ""
                edges.append(_edge(pos[p], (x, y), label, href, "unlearn" if record else "parent"))
        if v.dataset_artifact_id and f"ds:{v.dataset_artifact_id}" in pos:
            edges.append(_edge(pos[f"ds:{v.dataset_artifact_id}"], (x, y), "trained on", "", "dataset"))
        aliases = f" @{', @'.join(v.aliases)}" if v.aliases else ""
        boxes.append(_box((x, y), f"{v.name} v{v.version}", f"{v.kind}{aliases}",
                          f"/models/{quote(v.name)}#v{v.version}", "version", f"version-{v.name}-{v.version}"))
    for d in datasets:
        boxes.append(_box(pos[f"ds:{d.id}"], d.name or d.id[:8], f"dataset {d.id[:8]}", f"/artifacts/{d.id}",
                          "dataset", f"dataset-{d.id}"))
    width = PAD * 2 + (max(columns, default=0) + 1) * COL_W - (COL_W - BOX_W)
    height = PAD * 2 + max((len(n) for n in columns.values()), default=1) * ROW_H - (ROW_H - BOX_H)
    return (f'<svg class="lineage" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="lineage graph">'
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>'
            + "".join(edges) + "".join(boxes) + "</svg>")


def method_name(method: int) -> str:
    """An unlearning method as words ("certified noisy minimizer")."""
    from praxon.unlearning.v1 import unlearning_pb2

    return unlearning_pb2.Method.Name(method).removeprefix("METHOD_").lower().replace("_", " ")


def _box(at: tuple[int, int], title: str, subtitle: str, href: str, cls: str, node_id: str) -> str:
    x, y = at
    return (f'<a href="{escape(href)}" class="node {cls}" data-node="{escape(node_id)}">'
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
            f'<text x="{x + 10}" y="{y + 20}" class="title">{escape(title[:30])}</text>'
            f'<text x="{x + 10}" y="{y + 38}" class="sub">{escape(subtitle[:34])}</text></a>')


def _edge(src: tuple[int, int], dst: tuple[int, int], label: str, href: str, cls: str) -> str:
    x1, y1 = src[0] + BOX_W, src[1] + BOX_H // 2
    x2, y2 = dst[0], dst[1] + BOX_H // 2
    text = (f'<text x="{(x1 + x2) // 2}" y="{(y1 + y2) // 2 - 6}" text-anchor="middle" class="edge-label">'
            f'{escape(label)}</text>')
    if href:
        text = f'<a href="{escape(href)}">{text}</a>'
    return (f'<g class="edge {cls}"><line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" marker-end="url(#arrow)"/>'
            f'{text}</g>')
