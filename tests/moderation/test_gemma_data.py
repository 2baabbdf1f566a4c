"""The committed real-request data of the Gemma guard (services/moderation/data/make_gemma_pairs.py): the pairs file
is what `assemble` makes of the committed requests and replies, no source request or template group is on two
sides of the split, and the shared openers really occur after harmful and after benign requests."""
from __future__ import annotations

import json
from collections import defaultdict

from services.moderation.data import make_gemma_pairs as mk
from services.moderation.schema import parse_guard_jsonl


def _jsonl(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_the_pairs_file_is_assembled_from_the_committed_requests_and_replies():
    rows = mk.assemble(_jsonl(mk.REQUESTS), _jsonl(mk.REPLIES))
    assert rows == _jsonl(mk.PAIRS)
    assert len(parse_guard_jsonl(mk.PAIRS.read_bytes())) == len(rows)  # every row is a valid guard row


def test_every_request_has_its_replies_and_one_split():
    requests = _jsonl(mk.REQUESTS)
    replies = _jsonl(mk.REPLIES)
    planned = {(j["request_id"], j["kind"]) for j in mk.reply_jobs(requests)}
    assert {(r["request_id"], r["kind"]) for r in replies} == planned
    for r in requests:  # the split is a function of the template group
        assert r["group"] == mk.template_group(r["text"]) and r["split"] == mk.split_of(r["group"])


def test_no_request_or_template_group_is_on_two_sides():
    sides: dict[str, set] = defaultdict(set)
    for row in _jsonl(mk.PAIRS):
        sides["id:" + row["id"].split("#")[0]].add(row["split"])
        sides["group:" + row["group"]].add(row["split"])
        if row.get("prompt"):
            sides["prompt:" + row["prompt"]].add(row["split"])
    assert all(len(s) == 1 for s in sides.values()), [k for k, s in sides.items() if len(s) > 1][:5]


def test_shared_openers_occur_after_harmful_and_benign_requests():
    """Only content-free openers are shared (those Gemma began several replies with), and each occurs, in its split,
    as a reply to a harmful and to a benign request (as a shared opener or as a whole compliant reply)."""
    labels: dict[tuple[str, str], set] = defaultdict(set)
    shared = set()
    for row in _jsonl(mk.PAIRS):
        if row["role"] == "response":
            labels[(row["split"], row["text"])].add(row["unsafe"])
        if row["source"].endswith("/shared_opener"):
            shared.add((row["split"], row["text"]))
    openers = mk.shared_openers(_jsonl(mk.REPLIES))
    assert {t for _, t in shared} == openers and "Sure, here's one:" in openers
    assert all(labels[k] == {True, False} for k in shared), [k for k in shared if labels[k] != {True, False}][:5]
