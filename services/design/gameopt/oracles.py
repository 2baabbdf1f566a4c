"""Benchmark oracles for unattended ("oracle") campaigns and the benchmark harness.

Ehrlich functions (Stanton et al. 2024, "Closed-Form Test Functions for Biophysical Sequence Design"), written here
from the paper's definition and checked line by line against holo-bench's reference implementation
(github prescient-design/holo-bench, holo/test_functions/closed_form/_ehrlich.py and elemental/, commit a58d03e),
whose construction this follows:
- a discrete Markov process (DMP) over v states with a sparse ergodic transition matrix: random softmax rows
  (temperature 0.5) masked by a banded matrix (bandwidth int(0.4 v), wrapping) whose rows are shuffled, with
  self-transitions always allowed; the initial distribution is uniform, so a sequence is feasible iff every
  transition x_t -> x_{t+1} has non-zero probability;
- c motifs of length k, drawn as one DMP sample of length c*k started from the stationary distribution and cut in c
  pieces (so a feasible optimum exists), each with spacings s (s_0 = 0, gaps 1 + floor(w * (slack // c)) for w
  uniform on the simplex);
- f(x) = prod_i max_l h_q(x, motif_i, spacing_i, l) for feasible x, 0 otherwise, where h_q is the fraction of the
  motif's elements present at offsets l + s_j, quantised down to multiples of 1/q (the paper's
  floor(q * count / k) / q). The optimum is 1. holo-bench quantises as (count // ceil(k/q)) / (k / ceil(k/q)): the
  same when q divides k (always so for the default q = k); for other q its full motif scores below 1 (k=5, q=3:
  0.8, and its own optimal_solution check raises), so the paper's form is kept.
- `initial_solution(n)`: n DMP samples from the stationary distribution, holo-bench's initial solutions: feasible by
  construction (uniform sequences of length 32 over 20 states are almost never feasible).
Where this differs from holo-bench: infeasible sequences score 0 (the paper's convention; holo-bench returns -inf,
and 0 keeps values finite for a GP); the random draws use numpy, so a seed gives another function than holo-bench's
torch generator would; an unlucky non-ergodic transition matrix is redrawn (holo-bench raises); holo-bench's optional
epistasis term (cubic response, off by default) is not implemented. benchmarks/design/holo_crosscheck.py runs
holo-bench's released package (`pytorch-holo` 0.0.5, in an environment of its own: it pins numpy<2) or its source
from a checkout, loads its transition matrix, motifs and spacings into this class and compares feasibility and
values on uniform, DMP, optimal and single-mutant sequences (9 sizes x 3 seeds: identical wherever q divides k;
k=4, q=3 differs as said above).

`ExhaustiveLandscape`: every sequence of a short length scored by a fixed random model (site effects plus
neighbouring-pair epistasis), rescaled to [0, 1]; the whole table is known, so its optimum is exact."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"


def _letters(n: int) -> str:
    if n <= 20:
        return AMINO_ACIDS[:n]
    base = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return base[:n]


def _sparse_ergodic_transitions(v: int, rng: np.random.Generator) -> np.ndarray:
    bandwidth = int(v * 0.4)
    for _ in range(100):
        logits = rng.standard_normal((v, v)) / 0.5
        dense = np.exp(logits - logits.max(-1, keepdims=True))
        dense /= dense.sum(-1, keepdims=True)
        band = np.zeros((v, v), dtype=bool)
        for i in range(v):
            for j in range(i - bandwidth, i + bandwidth + 1):
                band[i, j % v] = True
        mask = band[rng.permutation(v)] | np.eye(v, dtype=bool)
        P = np.where(mask, dense, 0.0)
        P /= P.sum(-1, keepdims=True)
        # ergodic (irreducible and aperiodic): P^m > 0 for m = (v-1)^2 + 1 (Wielandt)
        Q = (P > 0).astype(np.float64)
        R = Q.copy()
        for _ in range((v - 1) ** 2):
            R = np.minimum(R @ Q, 1.0)
        if (R > 0).all():
            return P
    raise RuntimeError("could not draw an ergodic transition matrix")


def _stationary(P: np.ndarray) -> np.ndarray:
    v = len(P)
    A = np.vstack([(np.eye(v) - P).T, np.ones((1, v))])
    b = np.zeros(v + 1)
    b[-1] = 1.0
    pi, *_ = np.linalg.lstsq(A, b, rcond=None)
    pi = np.clip(pi, 0, None)
    return pi / pi.sum()


@dataclass
class Ehrlich:
    num_states: int = 20
    length: int = 12
    num_motifs: int = 2
    motif_length: int = 4
    quantization: int | None = None
    seed: int = 0
    transitions: np.ndarray = field(init=False, repr=False)
    motifs: list[np.ndarray] = field(init=False, repr=False)
    spacings: list[np.ndarray] = field(init=False, repr=False)
    stationary: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        v, L, c, k = self.num_states, self.length, self.num_motifs, self.motif_length
        if v < 2 or k < 1 or c < 1:
            raise ValueError("num_states >= 2, motif_length >= 1, num_motifs >= 1")
        q = self.quantization if self.quantization is not None else k
        if not 1 <= q <= k:
            raise ValueError("quantization must be in [1, motif_length]")
        slack = L - c * k
        if slack < 0 or (k > 1 and 1 + slack // (c * (k - 1)) < 1):
            raise ValueError("length must be at least num_motifs * motif_length")
        rng = np.random.default_rng(self.seed)
        self.transitions = _sparse_ergodic_transitions(v, rng)
        self.stationary = _stationary(self.transitions)
        seq = self._sample_dmp(rng, 1, c * k)[0]
        self.motifs = [seq[i * k:(i + 1) * k].copy() for i in range(c)]
        self.spacings = []
        for _ in range(c):
            if k == 1:
                self.spacings.append(np.zeros(1, dtype=np.int64))
                continue
            w = rng.random(k - 1)
            w /= w.sum()
            gaps = 1 + np.floor((slack // c) * w).astype(np.int64)
            self.spacings.append(np.concatenate([[0], np.cumsum(gaps)]).astype(np.int64))

    def _sample_dmp(self, rng: np.random.Generator, n: int, steps: int) -> np.ndarray:
        """(n, steps) DMP samples: first state from the stationary distribution, then the transition rows."""
        X = np.zeros((n, steps), dtype=np.int64)
        if steps == 0:
            return X
        X[:, 0] = rng.choice(self.num_states, size=n, p=self.stationary)
        cdf = np.cumsum(self.transitions, axis=1)
        for t in range(1, steps):
            rows = cdf[X[:, t - 1]]
            # inverse-CDF draw from each row (u scaled by the row's total, so rounding never picks a zero entry)
            X[:, t] = (rng.random((n, 1)) * rows[:, -1:] >= rows).sum(1)
        return X

    def initial_solution(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n feasible starting sequences drawn from the DMP (holo-bench's `initial_solution`)."""
        return self._sample_dmp(rng, n, self.length)

    @property
    def alphabet(self) -> str:
        return _letters(self.num_states)

    @property
    def optimum(self) -> float:
        return 1.0

    def feasible(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.int64))
        if X.shape[1] < 2:
            return np.ones(len(X), dtype=bool)
        return (self.transitions[X[:, :-1], X[:, 1:]] > 0).all(-1)

    def motif_presence(self, X: np.ndarray) -> np.ndarray:
        """(n, c): the quantised fraction of each motif present at its best offset."""
        X = np.atleast_2d(np.asarray(X, dtype=np.int64))
        k = self.motif_length
        q = self.quantization if self.quantization is not None else k
        out = np.zeros((len(X), self.num_motifs))
        for i, (m, s) in enumerate(zip(self.motifs, self.spacings, strict=False)):
            offsets = np.arange(self.length - s[-1])
            idx = offsets[:, None] + s[None, :]  # (n_off, k)
            matches = (X[:, idx] == m[None, None, :]).sum(-1)  # (n, n_off)
            h = np.floor(q * matches / k + 1e-9) / q  # the paper's h_q (see the module note on holo-bench)
            out[:, i] = h.max(-1)
        return out

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.int64))
        value = self.motif_presence(X).prod(-1)
        return np.where(self.feasible(X), value, 0.0)

    def optimal_solution(self) -> np.ndarray:
        """Each motif with its gaps filled by repeats (self-transitions are always feasible), motifs back to back
        (consecutive in the DMP draw, so their junctions are feasible), the tail repeating the last state."""
        x = []
        for m, s in zip(self.motifs, self.spacings, strict=False):
            for j in range(len(m)):
                x.append(int(m[j]))
                if j + 1 < len(m):
                    x += [int(m[j])] * int(s[j + 1] - s[j] - 1)
        x += [x[-1]] * (self.length - len(x))
        return np.array(x, dtype=np.int64)

    def describe(self) -> dict:
        return {"kind": "ehrlich", "num_states": self.num_states, "length": self.length,
                "num_motifs": self.num_motifs, "motif_length": self.motif_length,
                "quantization": self.quantization or self.motif_length, "seed": self.seed}


@dataclass
class ExhaustiveLandscape:
    """All num_states**length sequences scored by a fixed random model: f(x) = sum_i a_i[x_i] +
    sum_i b_i[x_i, x_{i+1}], rescaled to [0, 1] over the whole table."""

    num_states: int = 4
    length: int = 5
    seed: int = 0
    table: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.num_states ** self.length > 2_000_000:
            raise ValueError("exhaustive landscapes hold at most 2,000,000 sequences")
        rng = np.random.default_rng(self.seed)
        v, L = self.num_states, self.length
        a = rng.standard_normal((L, v))
        b = rng.standard_normal((max(L - 1, 0), v, v)) * 0.7
        X = np.array(list(itertools.product(range(v), repeat=L)), dtype=np.int64)
        f = a[np.arange(L)[None], X].sum(-1)
        if L > 1:
            f += b[np.arange(L - 1)[None], X[:, :-1], X[:, 1:]].sum(-1)
        self.table = (f - f.min()) / (f.max() - f.min())

    @property
    def alphabet(self) -> str:
        return _letters(self.num_states)

    @property
    def optimum(self) -> float:
        return 1.0

    def _index(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.int64))
        weights = self.num_states ** np.arange(self.length - 1, -1, -1)
        return X @ weights

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return self.table[self._index(X)]

    def describe(self) -> dict:
        return {"kind": "exhaustive", "num_states": self.num_states, "length": self.length, "seed": self.seed}


def oracle_values(oracle, X: np.ndarray) -> list[float | None]:
    """The oracle's scores of X, None where the oracle says the sequence is infeasible (a failed measurement: an
    Ehrlich function's banned transition), not its conventional 0."""
    values = oracle(X)
    feasible = oracle.feasible(X) if hasattr(oracle, "feasible") else np.ones(len(X), dtype=bool)
    return [float(v) if ok else None for v, ok in zip(values, feasible, strict=True)]


def make_oracle(spec: dict):
    """An oracle from its description ({"kind": "ehrlich" | "exhaustive", ...})."""
    kind = spec.get("kind")
    if kind == "ehrlich":
        return Ehrlich(num_states=int(spec["num_states"]), length=int(spec["length"]),
                       num_motifs=int(spec["num_motifs"]), motif_length=int(spec["motif_length"]),
                       quantization=int(spec["quantization"]) if spec.get("quantization") else None,
                       seed=int(spec.get("seed", 0)))
    if kind == "exhaustive":
        return ExhaustiveLandscape(num_states=int(spec["num_states"]), length=int(spec["length"]),
                                   seed=int(spec.get("seed", 0)))
    raise ValueError(f"unknown oracle kind {kind!r}")
