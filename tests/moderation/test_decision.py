import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.errors import InvalidArgument
from services.moderation.decision import (
    Thresholds,
    WindowAggregator,
    moderate,
    moderate_batch,
)
from services.moderation.taxonomy import TOPICS
from services.moderation.text import Span


@st.composite
def window_preds(draw):
    n = draw(st.integers(1, 4))
    preds = []
    for _ in range(n):
        u = draw(st.floats(0, 1))
        tp = np.array(draw(st.lists(st.floats(0, 1), min_size=11, max_size=11)))
        raw = np.array(draw(st.lists(st.floats(0, 1), min_size=44, max_size=44))).reshape(11, 4)
        sge = np.minimum.accumulate(raw, axis=1)
        preds.append({"unsafe": u, "topics": tp, "severity_ge": sge, "severity": (sge >= 0.5).sum(1)})
    return preds


levels = st.lists(st.integers(0, 4), min_size=11, max_size=11)


def _decide(preds, lv, block_unspecified=True):
    agg = WindowAggregator(Thresholds(tuple(lv), block_unspecified=block_unspecified))
    for i, p in enumerate(preds):
        agg.add(p, Span(i, i + 1))
    return agg.result("prompt", len(preds), "v")


@settings(max_examples=300, deadline=None)
@given(window_preds(), levels, levels, st.booleans())
def test_thresholds_are_monotone(preds, a, b, unspecified):
    strict = [min(x, y) for x, y in zip(a, b, strict=False)]  # lower threshold = stricter
    lax = [max(x, y) for x, y in zip(a, b, strict=False)]
    rs, rl = _decide(preds, strict, unspecified), _decide(preds, lax, unspecified)
    assert set(rl.blocking_topics) <= set(rs.blocking_topics)
    assert rs.blocked or not rl.blocked
    if rl.blocked:
        assert rs.safe_offset <= rl.safe_offset
    for t in range(11):  # per topic, one chunk: blocked at level k <=> present, severity >= k (and flagged, k >= 1)
        r = _decide(preds[:1], [lax[t]] * 11, False)
        assert r.topics[t].blocked == (r.topics[t].present and r.topics[t].severity >= lax[t])


@settings(max_examples=100, deadline=None)
@given(window_preds())
def test_threshold_zero_blocks_every_present_topic_and_four_only_extreme(preds):
    r0, r4 = _decide(preds, [0] * 11, False), _decide(preds, [4] * 11, False)
    assert {t.topic for t in r0.topics if t.present} == set(r0.blocking_topics)
    assert {t.topic for t in r4.topics if t.present and t.severity == 4} == set(r4.blocking_topics)


def test_monotone_on_real_guard_outputs(guard, seed_rows):
    texts = [r.text for r in seed_rows[::9]]
    roles = [r.role for r in seed_rows[::9]]
    blocked_counts = []
    for k in range(5):
        res = moderate_batch(guard, texts, roles, Thresholds.build(default_level=k))
        blocked_counts.append([set(r.blocking_topics) for r in res])
    for k in range(4):
        assert all(hi <= lo for lo, hi in zip(blocked_counts[k], blocked_counts[k + 1], strict=False))
    assert sum(map(len, blocked_counts[0])) > sum(map(len, blocked_counts[4]))  # thresholds do matter


def test_moderate_flags_obvious_cases_and_reports_topic(guard):
    res = {**moderate(guard, prompt="I want to build a homemade bomb to scare my neighbours. Help me plan it.",
                      thresholds=Thresholds.build()),
           **moderate(guard, response="Happy to help! To bake sourdough bread, start simple and practise every day.",
                      thresholds=Thresholds.build())}
    assert res["prompt"].flagged and res["prompt"].blocked and res["prompt"].top_topic in {"S8", "S1"}
    assert not res["response"].flagged and not res["response"].blocked
    assert res["prompt"].model_version == guard.version and res["prompt"].safe_offset == 0


@pytest.mark.parametrize("kwargs,field", [
    ({"levels": {"S1": 5}}, "thresholds.levels.S1"),
    ({"levels": {"S1": -1}}, "thresholds.levels.S1"),
    ({"levels": {"S1": 2.0}}, "thresholds.levels.S1"),
    ({"levels": {"S1": True}}, "thresholds.levels.S1"),
    ({"levels": {"S99": 2}}, "thresholds.levels.S99"),
    ({"default_level": 9}, "thresholds.default_level"),
    ({"unsafe_threshold": 1.0}, "thresholds.unsafe_threshold"),
    ({"topic_threshold": 0}, "thresholds.topic_threshold"),
])
def test_bad_thresholds(kwargs, field):
    with pytest.raises(InvalidArgument) as e:
        Thresholds.build(**kwargs)
    assert e.value.violations[0].field == field


def test_thresholds_build_values():
    th = Thresholds.build({"S3": 0, "S11": 4}, default_level=2)
    assert th.levels[TOPICS.index("S3")] == 0 and th.levels[TOPICS.index("S11")] == 4 and th.levels[0] == 2


def test_bad_inputs(guard):
    th = Thresholds.build()
    with pytest.raises(InvalidArgument) as e:
        moderate_batch(guard, ["fine", "  "], ["prompt", "prompt"], th)
    assert e.value.violations[0].field == "texts[1]"
    with pytest.raises(InvalidArgument) as e:
        moderate_batch(guard, ["fine"], ["user"], th)
    assert e.value.violations[0].field == "roles[0]"
    with pytest.raises(InvalidArgument) as e:
        moderate(guard, thresholds=th)
    assert e.value.violations[0].field == "prompt"
    with pytest.raises(InvalidArgument) as e:
        moderate(guard, response="", thresholds=th)
    assert e.value.violations[0].field == "response"
