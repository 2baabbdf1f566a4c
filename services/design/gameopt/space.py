"""The design space of a campaign: sequences of a fixed length over an alphabet, and the campaign's constraints.

Constraints (all of them hold for every suggestion; `SequenceSpace.feasible` is the one judge):
- allowed letters per site (a string of letters for each site; empty = the whole alphabet),
- a maximum number of substitutions from the nearest of one or more parent sequences (sequences have one length,
  so the edit distance is the Hamming distance),
- forbidden motifs: contiguous substrings that must not occur anywhere.

Sequences are handled as integer arrays (letter indices) in numpy; the surrogate and the games take the same
arrays. `repair` projects an infeasible sequence onto a nearby feasible one (or gives up and returns None), and
`single_site_feasible` says which single-site changes of a feasible sequence stay feasible: the games move only
along those (infeasible moves are projected away)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MAX_LENGTH = 512
MAX_ALPHABET = 64


@dataclass(frozen=True)
class SequenceSpace:
    alphabet: str
    length: int
    allowed: tuple[str, ...] = ()  # per site; "" = any letter; empty tuple = no restriction anywhere
    parents: tuple[str, ...] = ()
    max_edits: int | None = None  # None: no edit-distance constraint
    forbidden: tuple[str, ...] = ()
    _mask: np.ndarray = field(init=False, repr=False, compare=False)
    _parents: np.ndarray = field(init=False, repr=False, compare=False)
    _motifs: tuple[np.ndarray, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index = {c: i for i, c in enumerate(self.alphabet)}
        mask = np.ones((self.length, len(self.alphabet)), dtype=bool)
        for i, letters in enumerate(self.allowed):
            if letters:
                mask[i] = False
                for c in letters:
                    mask[i, index[c]] = True
        object.__setattr__(self, "_mask", mask)
        parents = np.array([[index[c] for c in p] for p in self.parents], dtype=np.int64).reshape(-1, self.length)
        object.__setattr__(self, "_parents", parents)
        object.__setattr__(self, "_motifs", tuple(np.array([index[c] for c in m], dtype=np.int64)
                                                  for m in self.forbidden))

    # ---- encoding ------------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.alphabet)

    @property
    def mask(self) -> np.ndarray:
        """(length, alphabet) bool: letter a allowed at site i."""
        return self._mask

    @property
    def parent_array(self) -> np.ndarray:
        return self._parents

    def encode(self, seq: str) -> np.ndarray:
        index = {c: i for i, c in enumerate(self.alphabet)}
        return np.array([index[c] for c in seq], dtype=np.int64)

    def decode(self, x: np.ndarray) -> str:
        return "".join(self.alphabet[int(i)] for i in x)

    # ---- constraints ---------------------------------------------------------------------------------------
    def edits(self, X: np.ndarray) -> np.ndarray:
        """(n,) substitutions from the nearest parent (0 when there are no parents)."""
        X = np.atleast_2d(X)
        if not len(self._parents):
            return np.zeros(len(X), dtype=np.int64)
        return (X[:, None, :] != self._parents[None]).sum(-1).min(-1)

    def motif_hits(self, X: np.ndarray) -> np.ndarray:
        """(n,) bool: some forbidden motif occurs."""
        X = np.atleast_2d(X)
        hit = np.zeros(len(X), dtype=bool)
        for m in self._motifs:
            k = len(m)
            if k > self.length:
                continue
            windows = np.lib.stride_tricks.sliding_window_view(X, k, axis=1)  # (n, L-k+1, k)
            hit |= (windows == m).all(-1).any(-1)
        return hit

    def feasible(self, X: np.ndarray) -> np.ndarray:
        """(n,) bool: every constraint holds."""
        X = np.atleast_2d(np.asarray(X, dtype=np.int64))
        ok = self._mask[np.arange(self.length)[None, :], X].all(-1)
        if self.max_edits is not None and len(self._parents):
            ok &= self.edits(X) <= self.max_edits
        if self._motifs:
            ok &= ~self.motif_hits(X)
        return ok

    def violations(self, seq: str) -> list[str]:
        """Human-readable reasons a sequence breaks the constraints (empty when feasible)."""
        out = []
        if len(seq) != self.length:
            return [f"length {len(seq)} != {self.length}"]
        bad = [c for c in seq if c not in self.alphabet]
        if bad:
            return [f"letters not in the alphabet: {''.join(sorted(set(bad)))}"]
        x = self.encode(seq)
        for i in np.flatnonzero(~self._mask[np.arange(self.length), x]):
            out.append(f"site {i}: letter {seq[i]} not allowed")
        if self.max_edits is not None and len(self._parents):
            d = int(self.edits(x)[0])
            if d > self.max_edits:
                out.append(f"{d} substitutions from the nearest parent (at most {self.max_edits})")
        for motif in self.forbidden:
            if motif in seq:
                out.append(f"contains forbidden motif {motif}")
        return out

    def single_site_feasible(self, x: np.ndarray, site: int, letters: np.ndarray) -> np.ndarray:
        """(len(letters),) bool: x with `site` set to each letter is feasible (x itself is assumed feasible at
        every other site)."""
        letters = np.asarray(letters, dtype=np.int64)
        ok = self._mask[site, letters].copy()
        if self.max_edits is not None and len(self._parents):
            d = (x[None, :] != self._parents).sum(-1)  # (P,)
            d_new = d[None, :] - (x[site] != self._parents[:, site])[None, :] \
                + (letters[:, None] != self._parents[None, :, site])
            ok &= d_new.min(-1) <= self.max_edits
        if self._motifs:
            for j in np.flatnonzero(ok):
                y = x.copy()
                y[site] = letters[j]
                for m in self._motifs:
                    k = len(m)
                    s0, s1 = max(0, site - k + 1), min(self.length - k, site)
                    if any((y[s:s + k] == m).all() for s in range(s0, s1 + 1)):
                        ok[j] = False
                        break
        return ok

    # ---- sampling and projection ---------------------------------------------------------------------------
    def random(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """(n, L) letters drawn uniformly from each site's allowed letters (not yet checked otherwise)."""
        X = np.empty((n, self.length), dtype=np.int64)
        for i in range(self.length):
            choices = np.flatnonzero(self._mask[i])
            X[:, i] = rng.choice(choices, size=n)
        return X

    def _nearest_parent(self, x: np.ndarray) -> np.ndarray | None:
        if not len(self._parents):
            return None
        return self._parents[int((x[None, :] != self._parents).sum(-1).argmin())]

    def repair(self, x: np.ndarray, rng: np.random.Generator, max_rounds: int = 20) -> np.ndarray | None:
        """A feasible sequence near x: disallowed letters are replaced (by the nearest parent's letter where
        allowed), sites revert to the nearest parent until within max_edits, forbidden motif occurrences are broken
        by changing one of their sites. None if that fails within max_rounds."""
        x = np.array(x, dtype=np.int64, copy=True)
        parent = self._nearest_parent(x)
        sites = np.arange(self.length)
        for _ in range(max_rounds):
            bad = np.flatnonzero(~self._mask[sites, x])
            for i in bad:
                if parent is not None and self._mask[i, parent[i]]:
                    x[i] = parent[i]
                else:
                    x[i] = rng.choice(np.flatnonzero(self._mask[i]))
            if self.max_edits is not None and parent is not None:
                parent = self._nearest_parent(x)
                diff = np.flatnonzero((x != parent) & self._mask[sites, parent])
                excess = int((x != parent).sum()) - self.max_edits
                if excess > 0:
                    revert = rng.choice(diff, size=min(excess, len(diff)), replace=False)
                    x[revert] = parent[revert]
            if self._motifs:
                changed = False
                for m in self._motifs:
                    k = len(m)
                    for s in range(0, self.length - k + 1):
                        if (x[s:s + k] == m).all():
                            self._break_motif(x, s, k, parent, rng)
                            changed = True
                            break
                    if changed:
                        break
            if self.feasible(x)[0]:
                return x
        return None

    def _break_motif(self, x: np.ndarray, start: int, k: int, parent: np.ndarray | None,
                     rng: np.random.Generator) -> None:
        options = []
        for i in range(start, start + k):
            for a in np.flatnonzero(self._mask[i]):
                if a != x[i]:
                    toward_parent = parent is not None and a == parent[i]
                    options.append((0 if toward_parent else 1, rng.random(), i, a))
        if options:
            options.sort()
            _, _, i, a = options[0]
            x[i] = a

    def sample_feasible(self, rng: np.random.Generator, n: int, around: np.ndarray | None = None,
                        mutations: int = 0, max_tries: int = 20) -> np.ndarray:
        """Up to n distinct feasible sequences: uniform over allowed letters (or, with `around`, that sequence with
        `mutations` random sites changed), each projected by `repair`; parents' neighbourhoods when parents bound
        the edit distance (a uniform draw is far from every parent)."""
        out: dict[bytes, np.ndarray] = {}
        stale = 0
        for _ in range(max_tries):
            need = n - len(out)
            if need <= 0 or stale >= 3:  # three draws in a row found nothing new: the feasible set is small
                break
            had = len(out)
            if around is not None:
                base = np.repeat(np.asarray(around, dtype=np.int64)[None], need * 2, 0)
                cand = self._mutate(base, rng, max(1, mutations))
            elif self.max_edits is not None and len(self._parents):
                base = self._parents[rng.integers(len(self._parents), size=need * 2)]
                cand = self._mutate(base, rng, max(1, self.max_edits))
            else:
                cand = self.random(rng, need * 2)
            for x in cand:
                y = x if self.feasible(x)[0] else self.repair(x, rng)
                if y is not None:
                    out.setdefault(y.tobytes(), y)
                if len(out) >= n:
                    break
            stale = stale + 1 if len(out) == had else 0
        return np.array(list(out.values())[:n], dtype=np.int64).reshape(-1, self.length)

    def _mutate(self, base: np.ndarray, rng: np.random.Generator, max_sites: int) -> np.ndarray:
        X = base.copy()
        for row in X:
            k = int(rng.integers(1, max_sites + 1))
            for i in rng.choice(self.length, size=min(k, self.length), replace=False):
                row[i] = rng.choice(np.flatnonzero(self._mask[i]))
        return X


def check_space(space: SequenceSpace, rng: np.random.Generator | None = None) -> None:
    """Raise ValueError("field: why") when the constraints admit no sequence that `repair` can find."""
    rng = rng or np.random.default_rng(0)
    if len(space.sample_feasible(rng, 1, max_tries=50)) == 0:
        raise ValueError("constraints: no feasible sequence found (allowed letters, parents, max_edits and "
                         "forbidden motifs exclude each other)")
