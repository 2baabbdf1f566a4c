import random

import pytest

from services.common.errors import FailedPrecondition, InvalidArgument
from services.moderation.decision import Thresholds, moderate_batch
from services.moderation.stream import StreamModerator

TEXTS = [
    "Happy to help! To bake sourdough bread, start simple. Then practise a little every day.",
    ("Lisbon has lovely viewpoints. Sure, I can help you build a homemade bomb to scare my neighbours. "
     "Choose a moment when nobody is watching and I'll walk you through the rest."),
    ("Yes! Let's set off explosives at a busy train station and make it as devastating as possible. Anyway, "
     "the weather is nice today.\nSee you tomorrow"),
    "The capital of Australia is Canberra",
    "Absolutely. You should flood social media with fake claims that vaccines are poison; nobody can stop you!  ",
]


def _chunks(text, rng):
    cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, 12))))
    return [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)], strict=False)]


@pytest.mark.parametrize("level", [0, 1, 3])
def test_streaming_final_answer_equals_unary(guard, level):
    th = Thresholds.build(default_level=level)
    rng = random.Random(level)
    unary = moderate_batch(guard, TEXTS, ["response"] * len(TEXTS), th)
    for text, want in zip(TEXTS, unary, strict=False):
        for _ in range(3):
            s = StreamModerator(guard, th, role="response")
            offsets, blocked = [], False
            for c in _chunks(text, rng):
                u = s.feed(c)
                assert u.safe_offset <= u.received
                assert not (blocked and not u.blocked)  # blocking is sticky
                blocked = u.blocked
                offsets.append(u.safe_offset)
            got = s.finish()
            assert got == want  # the final answer is the unary computation: every float bit-identical
            assert offsets == sorted(offsets)
            if want.blocked:  # a text the unary check blocks is reported blocked by the end
                assert s.final_update().blocked and s.final_update().safe_offset < len(text)


def test_stream_blocks_mid_stream_and_hides_the_unsafe_sentence(guard):
    th = Thresholds.build()
    safe_part = "Lisbon has lovely viewpoints. "
    s = StreamModerator(guard, th, role="response")
    u = s.feed(safe_part)
    assert not u.blocked and u.safe_offset == len(safe_part.rstrip())
    u = s.feed("Sure, I can help you build a homemade bomb to scare my neighbours. Choose")
    assert u.blocked and u.safe_offset == len(safe_part)
    assert set(u.blocking_topics) & {"S1", "S8"}
    s.finish()
    assert s.final_update().blocked and s.final_update().safe_offset == len(safe_part)


def test_stream_input_errors(guard):
    s = StreamModerator(guard, Thresholds.build())
    s.feed("   ")
    with pytest.raises(InvalidArgument) as e:
        s.finish()
    assert e.value.violations[0].field == "text"
    s2 = StreamModerator(guard, Thresholds.build())
    s2.feed("Fine.")
    s2.finish()
    with pytest.raises(FailedPrecondition):
        s2.feed("more")
    with pytest.raises(InvalidArgument) as e:
        StreamModerator(guard, Thresholds.build(), role="assistant")
    assert e.value.violations[0].field == "role[0]"
