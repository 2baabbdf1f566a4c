"""Prefix-stable sentence segmentation and the sentence windows the guard scores.

Prefix-stable: every boundary decision at position j looks only at text[start .. j+1] (and a length cut only at
text[start .. start+max_chars]), so the complete sentences found in any prefix of a text are exactly the first
sentences of the whole text. The streaming check relies on this to give the same windows as the unary check."""
from __future__ import annotations

from dataclasses import dataclass

SENTENCE_END = ".!?"
CLOSERS = "\"')]\u201d\u2019"
DEFAULT_MAX_SENTENCE_CHARS = 400
DEFAULT_WINDOW_SENTENCES = 2


@dataclass(frozen=True)
class Span:
    start: int
    end: int  # exclusive


def _is_boundary(text: str, j: int) -> bool:
    """True when a sentence ends after text[j] (needs text[j+1] to exist)."""
    if not text[j + 1].isspace():
        return False
    c = text[j]
    if c in SENTENCE_END:
        return True
    k = j
    while k >= 0 and text[k] in CLOSERS:
        k -= 1
    return k < j and k >= 0 and text[k] in SENTENCE_END


def scan_sentences(text: str, pos: int = 0, *, final: bool,
                   max_chars: int = DEFAULT_MAX_SENTENCE_CHARS) -> tuple[list[Span], int]:
    """Sentences of text[pos:] that are complete. Returns (spans, next_pos): scanning again from next_pos once more
    text has arrived continues where this left off. With final=True the trailing text is a sentence too."""
    spans: list[Span] = []
    n = len(text)
    i = pos
    while True:
        s = i
        while s < n and text[s].isspace():
            s += 1
        if s >= n:
            return spans, (n if final else i)
        limit = min(n, s + max_chars)
        end = nxt = -1
        for j in range(s, limit):
            if text[j] == "\n":
                end, nxt = j, j + 1
                break
            if j + 1 < n and _is_boundary(text, j):
                end, nxt = j + 1, j + 1
                break
        if end < 0:
            if s + max_chars < n:  # length cut (decidable once text[s + max_chars] exists, which the boundary
                # test at j = s + max_chars - 1 needs): the last whitespace inside the window, else a hard cut
                ws = max((k for k in range(s + 1, s + max_chars) if text[k].isspace()), default=-1)
                end = nxt = ws if ws > 0 else s + max_chars
            elif final:
                end = nxt = n
            else:
                return spans, i
        e = end
        while e > s and text[e - 1].isspace():
            e -= 1
        spans.append(Span(s, e))
        i = nxt


def split_sentences(text: str, *, max_chars: int = DEFAULT_MAX_SENTENCE_CHARS) -> list[Span]:
    return scan_sentences(text, 0, final=True, max_chars=max_chars)[0]


def window_span(sentences: list[Span], i: int, window: int = DEFAULT_WINDOW_SENTENCES) -> Span:
    """The window ending at sentence i: sentences[max(0, i-window+1) .. i] as one span of the original text."""
    return Span(sentences[max(0, i - window + 1)].start, sentences[i].end)
