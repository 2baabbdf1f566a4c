import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.errors import InvalidArgument
from services.moderation.schema import (
    dump_guard_jsonl,
    import_bingoguard,
    import_wildguardmix,
    parse_guard_jsonl,
)
from services.moderation.taxonomy import TOPIC_NAMES, TOPICS, severity_rubric


def _jsonl(rows):
    return "\n".join(json.dumps(r) for r in rows).encode()


GOOD = {"text": "hello", "role": "prompt", "unsafe": False, "topics": [], "severity": 0}


def test_seed_set_covers_topics_roles_levels_and_splits(seed_rows):
    assert 300 <= len(seed_rows) <= 1500
    assert {t for r in seed_rows for t in r.topics} == set(TOPICS)
    assert {r.role for r in seed_rows} == {"prompt", "response"}
    assert {v for r in seed_rows for v in r.severity.values()} == {0, 1, 2, 3, 4}
    assert {r.split for r in seed_rows} == {"train", "validation"}
    assert sum(not r.unsafe for r in seed_rows) >= 150
    for t in TOPICS:  # every topic appears unsafe in both splits and both roles
        for split in ("train", "validation"):
            for role in ("prompt", "response"):
                assert any(t in r.topics and r.unsafe and r.split == split and r.role == role for r in seed_rows)


def test_every_topic_has_a_four_level_rubric_and_every_unsafe_label_uses_it(seed_rows):
    rubric = severity_rubric()
    raw = json.loads(Path(__file__).parents[2].joinpath("services/moderation/data/rubric.json").read_text())
    assert set(rubric) == set(TOPICS)
    for t in TOPICS:
        assert raw["topics"][t]["name"] == TOPIC_NAMES[t]
        assert sorted(rubric[t]) == [1, 2, 3, 4]
        defs = [rubric[t][k].strip() for k in (1, 2, 3, 4)]
        assert all(len(d) >= 40 for d in defs) and len(set(defs)) == 4  # four distinct, written-out definitions
    unsafe_levels = {t: set() for t in TOPICS}
    for r in seed_rows:
        assert not r.unsafe or (r.topics and set(r.topics) <= set(rubric)), r.id
        for t, lvl in r.severity.items():
            assert t in rubric, (r.id, t)
            assert lvl == 0 or (r.unsafe and lvl in rubric[t]), (r.id, t, lvl)
            if lvl:
                unsafe_levels[t].add(lvl)
    # the seed set exercises every level of every topic's rubric
    assert all(levels == {1, 2, 3, 4} for levels in unsafe_levels.values()), unsafe_levels


def test_shipped_seed_file_is_what_make_seed_writes(seed_rows):
    """The JSONL is generated (make_seed.py checks every unsafe label against the rubric while writing it)."""
    from services.moderation.data.make_seed import build_rows

    assert parse_guard_jsonl(_jsonl(build_rows())) == seed_rows


@pytest.mark.parametrize("bad,field", [
    ({**GOOD, "severity": 7}, "rows[2].severity"),
    ({**GOOD, "severity": True}, "rows[2].severity"),
    ({**GOOD, "unsafe": False, "topics": ["S1"], "severity": 3}, "rows[2].severity"),
    ({**GOOD, "unsafe": True, "topics": ["S1"], "severity": {"S2": 1}}, "rows[2].severity.S2"),
    ({**GOOD, "topics": ["S12"]}, "rows[2].topics[0]"),
    ({**GOOD, "topics": ["S1", "S1"]}, "rows[2].topics[1]"),
    ({**GOOD, "role": "assistant"}, "rows[2].role"),
    ({**GOOD, "text": "   "}, "rows[2].text"),
    ({**GOOD, "unsafe": "yes"}, "rows[2].unsafe"),
    ({**GOOD, "split": "dev"}, "rows[2].split"),
    ({**GOOD, "unsafe_p": 1.5}, "rows[2].unsafe_p"),
    ({**GOOD, "unsafe_p": True}, "rows[2].unsafe_p"),
    ({**GOOD, "topic_p": [0.5]}, "rows[2].topic_p"),
    ({**GOOD, "topic_p": {"S12": 0.5}}, "rows[2].topic_p.S12"),
    ({**GOOD, "topic_p": {"S1": "high"}}, "rows[2].topic_p.S1"),
])
def test_schema_violation_names_row_and_field(bad, field):
    with pytest.raises(InvalidArgument) as e:
        parse_guard_jsonl(_jsonl([GOOD, GOOD, bad, GOOD]))
    assert e.value.violations[0].field == field


def test_soft_labels_round_trip_and_are_the_targets():
    """A distilled guard's rows carry a teacher's probabilities (unsafe_p, topic_p): they survive dump/parse and
    replace the hard labels as guard.Targets."""
    from services.moderation.guard import Targets

    row = {**GOOD, "unsafe": True, "topics": ["S1"], "severity": 2, "unsafe_p": 0.7, "topic_p": {"S1": 0.6, "S3": 0.2}}
    (ex,) = parse_guard_jsonl(_jsonl([row]))
    assert parse_guard_jsonl(dump_guard_jsonl([ex])) == [ex]
    y = Targets.from_examples([ex])
    assert y.unsafe[0] == 0.7 and y.topic[0, 0] == 0.6 and y.topic[0, 2] == 0.2 and y.topic[0].sum() == 0.8
    assert y.severity[0, 0] == 2   # the row's own level


def test_invalid_json_and_blank_lines_keep_line_numbers():
    data = (json.dumps(GOOD) + "\n\n" + json.dumps(GOOD) + "\n{not json\n").encode()
    with pytest.raises(InvalidArgument) as e:
        parse_guard_jsonl(data)
    assert [v.field for v in e.value.violations] == ["rows[3]"]


def test_all_violations_are_reported_at_once():
    with pytest.raises(InvalidArgument) as e:
        parse_guard_jsonl(_jsonl([{**GOOD, "role": "x"}, GOOD, {**GOOD, "severity": -1}]))
    assert [v.field for v in e.value.violations] == ["rows[0].role", "rows[2].severity"]


def test_empty_dataset_is_invalid():
    with pytest.raises(InvalidArgument) as e:
        parse_guard_jsonl(b"\n\n")
    assert e.value.violations[0].field == "rows"


row_strategy = st.builds(
    lambda text, role, topics, lvl, split: {
        "text": text, "role": role, "unsafe": lvl >= 1 and bool(topics), "topics": topics,
        "severity": (lvl if topics else 0), "split": split},
    st.text(min_size=1, max_size=30).filter(lambda s: s.strip()),
    st.sampled_from(["prompt", "response"]),
    st.lists(st.sampled_from(TOPICS), unique=True, max_size=3),
    st.integers(0, 4),
    st.sampled_from(["train", "validation", "test"]))


@settings(max_examples=60, deadline=None)
@given(st.lists(row_strategy, min_size=1, max_size=8))
def test_valid_rows_roundtrip(rows):
    parsed = parse_guard_jsonl(_jsonl(rows))
    assert parse_guard_jsonl(dump_guard_jsonl(parsed)) == parsed
    assert [p.text for p in parsed] == [r["text"] for r in rows]


def test_bingoguard_import_maps_category_and_level():
    rows = import_bingoguard(_jsonl([
        {"prompt": "q", "response": "an answer", "category": "weapon", "level": "level_3"},
        {"prompt": "q", "response": "a safe answer", "category": "Hate and discriminate", "level": 0},
    ]))
    assert [(r.role, r.unsafe, r.topics, dict(r.severity)) for r in rows] == [
        ("response", True, ("S8",), {"S8": 3}), ("response", False, ("S5",), {"S5": 0})]
    with pytest.raises(InvalidArgument) as e:
        import_bingoguard([{"response": "x", "category": "cooking", "level": 1}])
    assert e.value.violations[0].field == "rows[0].category"


def test_wildguardmix_import_maps_labels_and_subcategories():
    rows = import_wildguardmix([
        {"prompt": "p1", "adversarial": False, "response": "r1", "prompt_harm_label": "harmful",
         "response_refusal_label": "refusal", "response_harm_label": "unharmful", "subcategory": "cyberattack"},
        {"prompt": "p2", "adversarial": True, "response": None, "prompt_harm_label": "unharmful",
         "response_refusal_label": None, "response_harm_label": None, "subcategory": "benign"},
        {"prompt": "p3", "response": "r3", "prompt_harm_label": "harmful", "response_harm_label": "harmful",
         "subcategory": "others"},
    ])
    got = [(r.text, r.role, r.unsafe, r.topics, dict(r.severity)) for r in rows]
    assert got == [("p1", "prompt", True, ("S7",), {}), ("r1", "response", False, (), {}),
                   ("p2", "prompt", False, (), {}), ("p3", "prompt", True, (), {}), ("r3", "response", True, (), {})]
    assert not rows[3].topics_known and rows[1].topics_known
    with pytest.raises(InvalidArgument) as e:
        import_wildguardmix([{"prompt": "p", "prompt_harm_label": "maybe"}])
    assert e.value.violations[0].field == "rows[0].prompt_harm_label"
