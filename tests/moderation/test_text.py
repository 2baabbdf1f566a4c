import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from services.moderation.text import scan_sentences, split_sentences

texts = st.text(alphabet="ab .!?\n\"')", max_size=120)


@settings(max_examples=300, deadline=None)
@given(texts, st.integers(4, 30))
def test_segmentation_is_prefix_stable(text, max_chars):
    full = split_sentences(text, max_chars=max_chars)
    for k in range(len(text) + 1):
        part, _ = scan_sentences(text[:k], 0, final=False, max_chars=max_chars)
        assert part == full[:len(part)]


@settings(max_examples=200, deadline=None)
@given(texts, st.lists(st.integers(0, 120), max_size=6))
def test_incremental_scan_equals_one_shot(text, cuts):
    pos, got = 0, []
    cuts = sorted(c for c in cuts if c <= len(text)) + [len(text)]
    for c in cuts:
        new, pos = scan_sentences(text[:c], pos, final=False)
        got += new
    new, pos = scan_sentences(text, pos, final=True)
    assert got + new == split_sentences(text)


@settings(max_examples=200, deadline=None)
@given(texts)
def test_sentences_cover_all_non_space_text_in_order(text):
    spans = split_sentences(text)
    covered = "".join(text[s.start:s.end] for s in spans)
    assert covered.replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "")
    assert all(a.end <= b.start for a, b in itertools.pairwise(spans))
    assert all(text[s.start:s.end].strip() == text[s.start:s.end] and s.end > s.start for s in spans)


def test_examples():
    t = 'Hello there. How are you?!  I said "fine." Thanks\nnext line'
    assert [t[s.start:s.end] for s in split_sentences(t)] == [
        "Hello there.", "How are you?!", 'I said "fine."', "Thanks", "next line"]
