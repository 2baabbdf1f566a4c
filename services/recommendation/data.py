"""Interactions -> sequential-recommendation Dataset artifact.

Input: CSV or Parquet bytes with columns `user`, `item`, `timestamp` and optionally `rating` (RecBole-style headers
such as `user_id:token` are accepted too). Row numbers in error reports are 0-based over the data rows: `rows[0]`
is the first row after the CSV header (or the first Parquet row). That same 0-based row index is the interaction's
stable `record_id`, which the unlearning service uses to forget records.

Dataset: item raw ids -> contiguous indices 1..N (index 0 is padding), users -> 0..U-1; per-user sequences ordered by
time, ties in file order (record_id). Under `leave_one_out` "time" is RecBole's own key, so that the split is
RecBole's to the record: RecBole min-max normalises the timestamp (normalize_all: True in its ml-100k config), keeps
it as a float32 tensor and stable-sorts every interaction by it before splitting per user (recbole_time_key below
cites where); float32 merges timestamps a few seconds apart, and those ties fall in file order (on ml-100k that moves
4 test and 5 validation targets, users 167, 186, 239, 392 and 444, against the raw timestamp). Under `user_split`
the raw timestamp orders. The split protocol is data, recorded in the dataset:

- `user_split` (DreamRec / PreferDiff): users split ~8/1/1 (train/valid/test) with a seeded permutation; training
  samples come from training users only; a valid/test user contributes one sample, their last item given the items
  before it.
- `leave_one_out` (RecBole / SASRec): every user is in every split; per user, the last item is the test target, the
  one before it the validation target, and every earlier next-item prediction (targets at positions 1..n-3) is a
  training sample. On ml-100k: 943 test users and 97,171 training samples.

Training samples are either every next item ("every_prefix", RecBole's way) or one per user ("last": the last
training item given the items before it, the official PreferDiff trainer's way); histories are the up to
`max_history` previous items. Evaluation samples also carry every item the user interacted with before the target
(`seen`), so "masked" evaluation can exclude the full history, as RecBole's masking does.
"""
from __future__ import annotations

import importlib.util
import io
import json
import math
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from services.common.errors import FailedPrecondition, FieldViolation, InvalidArgument

MAX_VIOLATIONS = 20
DATASET_FORMAT = "praxon.recommendation.dataset/v1"
DATASET_CONTENT_TYPE = "application/vnd.praxon.rec-dataset+safetensors"
REQUIRED_COLUMNS = ("user", "item", "timestamp")
_ALIASES = {"user_id": "user", "item_id": "item", "time": "timestamp"}
SPLITS = {"train": 0, "valid": 1, "test": 2}
PROTOCOLS = ("user_split", "leave_one_out")
TRAIN_SAMPLES = ("every_prefix", "last")


# ----------------------------------------------------------------------------------------------------- parsing
class _Violations:
    def __init__(self, cap: int = MAX_VIOLATIONS):
        self.cap = cap
        self.items: list[FieldViolation] = []
        self.dropped = 0

    def add(self, field: str, description: str) -> None:
        if len(self.items) < self.cap:
            self.items.append(FieldViolation(field, description))
        else:
            self.dropped += 1

    def raise_if_any(self) -> None:
        if not self.items:
            return
        vs = list(self.items)
        if self.dropped:
            vs.append(FieldViolation("rows", f"{self.dropped} more problem(s) not listed"))
        raise InvalidArgument(violations=vs, reason="INVALID_INTERACTIONS")


def _normalise_column(name: object) -> str:
    n = str(name).strip().lower().split(":", 1)[0]
    return _ALIASES.get(n, n)


def _read_frame(data: bytes, fmt: str | None) -> pd.DataFrame:
    if fmt is None:
        fmt = "parquet" if data[:4] == b"PAR1" else "csv"
    fmt = fmt.lower()
    if fmt == "parquet":
        try:
            table = pq.read_table(io.BytesIO(data))
        except pa.ArrowException as e:
            raise InvalidArgument("data", f"not a readable Parquet file: {e}") from None
        df = table.to_pandas()
        return df.astype(object).where(df.notna(), None)
    if fmt not in ("csv", "tsv"):
        raise InvalidArgument("format", f"unsupported format {fmt!r}; use 'csv' or 'parquet'")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InvalidArgument("data", f"CSV is not UTF-8 (byte {e.start})") from None
    first = text.split("\n", 1)[0]
    sep = "\t" if fmt == "tsv" or ("\t" in first and "," not in first) else ","
    try:
        return pd.read_csv(io.StringIO(text), sep=sep, dtype=str, keep_default_na=False, skip_blank_lines=True)
    except pd.errors.EmptyDataError:
        raise InvalidArgument("data", "the file is empty") from None
    except pd.errors.ParserError as e:
        raise InvalidArgument("data", f"malformed CSV: {e}") from None


def _cell_text(v: object) -> str | None:
    if v is None:
        return None
    if isinstance(v, float):
        if math.isnan(v):
            return None
        if v.is_integer():
            return str(int(v))
    s = str(v).strip()
    return s or None


def _parse_time(v: object) -> float | None:
    if v is None:
        return None
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, pd.Timestamp):
        return v.timestamp() if v is not pd.NaT else None
    s = str(v).strip()
    if not s:
        return None
    try:
        f = float(s)
        return f if math.isfinite(f) else None
    except ValueError:
        pass
    try:
        ts = pd.Timestamp(s)
    except (ValueError, TypeError):
        return None
    if ts is pd.NaT:
        return None
    if ts.tzinfo is None:
        ts = ts.tz_localize("UTC")
    return ts.timestamp()


def _parse_rating(v: object) -> tuple[float, bool]:
    """(value, ok); an empty cell is NaN and fine."""
    if v is None:
        return float("nan"), True
    if isinstance(v, bool):
        return float("nan"), False
    if isinstance(v, (int, float, np.integer, np.floating)):
        f = float(v)
        return (f, True) if math.isfinite(f) else (float("nan"), math.isnan(f))
    s = str(v).strip()
    if not s:
        return float("nan"), True
    try:
        f = float(s)
    except ValueError:
        return float("nan"), False
    return (f, True) if math.isfinite(f) else (float("nan"), False)


def read_interactions(data: bytes, *, fmt: str | None = None) -> pd.DataFrame:
    """Parse and validate interactions. Returns a DataFrame with columns user (str), item (str), timestamp (float
    seconds), rating (float, NaN when absent) and record_id (int: the 0-based data row index), in file order.
    Raises InvalidArgument with up to 20 field violations such as `rows[17].timestamp`."""
    if not data:
        raise InvalidArgument("data", "the file is empty")
    raw = _read_frame(data, fmt)
    raw.columns = [_normalise_column(c) for c in raw.columns]
    v = _Violations()
    seen: set[str] = set()
    for c in raw.columns:
        if c in seen:
            v.add(f"columns.{c}", "column appears more than once")
        seen.add(c)
    for c in REQUIRED_COLUMNS:
        if c not in raw.columns:
            v.add(f"columns.{c}", f"required column {c!r} is missing (found: {', '.join(map(str, raw.columns))})")
    v.raise_if_any()
    if len(raw) == 0:
        raise InvalidArgument("data", "no interaction rows")

    has_rating = "rating" in raw.columns
    n = len(raw)
    users: list[str | None] = [None] * n
    items: list[str | None] = [None] * n
    times = np.zeros(n, dtype=np.float64)
    ratings = np.full(n, np.nan, dtype=np.float64)
    ucol, icol, tcol = raw["user"].tolist(), raw["item"].tolist(), raw["timestamp"].tolist()
    rcol = raw["rating"].tolist() if has_rating else None
    for i in range(n):
        u, it = _cell_text(ucol[i]), _cell_text(icol[i])
        if u is None:
            v.add(f"rows[{i}].user", "is empty")
        if it is None:
            v.add(f"rows[{i}].item", "is empty")
        users[i], items[i] = u, it
        t = _parse_time(tcol[i])
        if t is None:
            v.add(f"rows[{i}].timestamp", f"{tcol[i]!r} is not a finite number of seconds or an ISO-8601 time")
        else:
            times[i] = t
        if rcol is not None:
            r, ok = _parse_rating(rcol[i])
            if not ok:
                v.add(f"rows[{i}].rating", f"{rcol[i]!r} is not a finite number")
            ratings[i] = r
    df = pd.DataFrame({"user": users, "item": items, "timestamp": times, "rating": ratings,
                       "record_id": np.arange(n, dtype=np.int64)})
    key = df[["user", "item", "timestamp"]]
    dup = key.duplicated(keep="first").to_numpy()
    if dup.any():
        first_of = key.groupby(["user", "item", "timestamp"], dropna=False, sort=False).ngroup().to_numpy()
        first_row: dict[int, int] = {}
        for i in range(n):
            g = int(first_of[i])
            if g not in first_row:
                first_row[g] = i
            elif dup[i]:
                v.add(f"rows[{i}]", f"duplicate of rows[{first_row[g]}] (same user, item and timestamp)")
    v.raise_if_any()
    return df


# ------------------------------------------------------------------------------------------------------ loaders
def movielens_100k_path() -> str:
    """Path of ml-100k.inter inside the installed recbole wheel (found without importing recbole)."""
    spec = importlib.util.find_spec("recbole")
    if spec is None or not spec.submodule_search_locations:
        raise FailedPrecondition("the recbole wheel (source of MovieLens-100k) is not installed",
                                 reason="BUILTIN_DATASET_UNAVAILABLE")
    for root in spec.submodule_search_locations:
        p = os.path.join(root, "dataset_example", "ml-100k", "ml-100k.inter")
        if os.path.exists(p):
            return p
    raise FailedPrecondition("recbole is installed but ships no dataset_example/ml-100k/ml-100k.inter",
                             reason="BUILTIN_DATASET_UNAVAILABLE")


def load_movielens_100k() -> pd.DataFrame:
    with open(movielens_100k_path(), "rb") as f:
        return read_interactions(f.read(), fmt="tsv")


def synthetic_interactions(*, n_users: int = 1000, n_items: int = 200, n_clusters: int = 10, successors: int = 3,
                           min_len: int = 6, max_len: int = 20, noise: float = 0.1,
                           popularity_exponent: float = 0.8, seed: int = 0) -> pd.DataFrame:
    """Sequences with planted first-order transitions: items fall into clusters; each item has `successors` next
    items (mostly in its own cluster) with Dirichlet weights; with probability `noise` the next item is drawn from a
    Zipf popularity (exponent `popularity_exponent`; 0 = uniform) instead; first items come from the same Zipf.
    A sequence model can learn P(next | last) and beat popularity by a wide margin."""
    if n_items < 2 * successors or n_clusters < 1 or n_users < 10 or not 2 <= min_len <= max_len:
        raise InvalidArgument("params", "synthetic generator needs n_items >= 2*successors, n_users >= 10, "
                                        "2 <= min_len <= max_len")
    rng = np.random.default_rng(seed)
    cluster = rng.integers(0, n_clusters, size=n_items)
    members = [np.flatnonzero(cluster == c) for c in range(n_clusters)]
    succ = np.zeros((n_items, successors), dtype=np.int64)
    probs = np.zeros((n_items, successors))
    for i in range(n_items):
        pool = members[cluster[i]]
        pool = pool[pool != i]
        chosen = []
        for _ in range(successors):
            use_cluster = pool.size > 0 and rng.random() < 0.8
            cand = pool if use_cluster else np.arange(n_items)
            for _try in range(20):
                c = int(rng.choice(cand))
                if c != i and c not in chosen:
                    break
            else:
                c = int(rng.choice([j for j in range(n_items) if j != i and j not in chosen]))
            chosen.append(c)
        succ[i] = chosen
        probs[i] = rng.dirichlet(np.ones(successors))
    pop = 1.0 / np.arange(1, n_items + 1) ** float(popularity_exponent)
    pop = pop[rng.permutation(n_items)]
    pop /= pop.sum()
    rows_u, rows_i, rows_t = [], [], []
    for u in range(n_users):
        length = int(rng.integers(min_len, max_len + 1))
        cur = int(rng.choice(n_items, p=pop))
        t = float(rng.integers(1_000_000_000, 1_100_000_000))
        for _ in range(length):
            rows_u.append(f"u{u}")
            rows_i.append(f"i{cur}")
            rows_t.append(t)
            t += float(rng.integers(1, 10_000))
            if rng.random() < noise:
                cur = int(rng.choice(n_items, p=pop))
            else:
                cur = int(succ[cur, rng.choice(successors, p=probs[cur])])
    n = len(rows_u)
    return pd.DataFrame({"user": rows_u, "item": rows_i, "timestamp": np.asarray(rows_t),
                         "rating": np.full(n, np.nan), "record_id": np.arange(n, dtype=np.int64)})


# ------------------------------------------------------------------------------------------------------ dataset
@dataclass
class Samples:
    """Next-item samples: history right-padded with 0 (item indices 1..N), its length, the target item index."""

    history: torch.Tensor  # [M, L] int64
    lengths: torch.Tensor  # [M] int64, >= 1
    target: torch.Tensor  # [M] int64
    user: torch.Tensor  # [M] int64
    target_record_id: torch.Tensor  # [M] int64
    seen: torch.Tensor | None = None  # [M, S] int64: every item before the target (0-padded), for masked evaluation

    def __len__(self) -> int:
        return int(self.target.shape[0])

    def subset(self, idx: torch.Tensor) -> "Samples":
        return Samples(self.history[idx], self.lengths[idx], self.target[idx], self.user[idx],
                       self.target_record_id[idx], None if self.seen is None else self.seen[idx])


@dataclass
class Dataset:
    item_ids: list[str]  # raw id of item index i + 1
    user_ids: list[str]  # raw id of user index u
    inter_user: torch.Tensor  # [n] int64, sorted by (user, time, record_id); time: see build_dataset
    inter_item: torch.Tensor  # [n] int64 in 1..N
    inter_time: torch.Tensor  # [n] float64
    inter_rating: torch.Tensor  # [n] float32, NaN when absent
    record_id: torch.Tensor  # [n] int64, the original 0-based row index
    user_split: torch.Tensor  # [U] int8: 0 train, 1 valid, 2 test (user_split protocol; all 0 for leave_one_out)
    max_history: int = 10
    seed: int = 0
    source: str = "upload"
    protocol: str = "user_split"

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    @property
    def n_users(self) -> int:
        return len(self.user_ids)

    def _offsets(self) -> np.ndarray:
        counts = np.bincount(self.inter_user.numpy(), minlength=self.n_users)
        return np.concatenate([[0], np.cumsum(counts)])

    def _positions(self, code: int, n: int, u_split: int, train_samples: str) -> list[int]:
        """0-based target positions of one user's length-n sequence in split `code`."""
        if self.protocol == "leave_one_out":
            if code == 2:
                return [n - 1] if n >= 2 else []
            if code == 1:
                return [n - 2] if n >= 3 else []
            last = n - 3
            if last < 1:
                return []
            return list(range(1, last + 1)) if train_samples == "every_prefix" else [last]
        if u_split != code or n < 2:
            return []
        if code == 0:
            return list(range(1, n)) if train_samples == "every_prefix" else [n - 1]
        return [n - 1]

    def samples(self, split: str, max_history: int | None = None, *, train_samples: str = "every_prefix",
                with_seen: bool = False) -> Samples:
        """Next-item samples of one split under the dataset's protocol (see the module docstring)."""
        if split not in SPLITS:
            raise InvalidArgument("split", f"unknown split {split!r}")
        if train_samples not in TRAIN_SAMPLES:
            raise InvalidArgument("train_samples", f"one of {', '.join(TRAIN_SAMPLES)}")
        L = int(max_history or self.max_history)
        code = SPLITS[split]
        off = self._offsets()
        items = self.inter_item.numpy()
        recs = self.record_id.numpy()
        split_of = self.user_split.numpy()
        hist, lens, tgt, usr, rid, seen = [], [], [], [], [], []
        for u in range(self.n_users):
            seq = items[off[u]:off[u + 1]]
            r = recs[off[u]:off[u + 1]]
            for t in self._positions(code, int(seq.size), int(split_of[u]), train_samples):
                h = seq[max(0, t - L):t]
                row = np.zeros(L, dtype=np.int64)
                row[:h.size] = h
                hist.append(row)
                lens.append(h.size)
                tgt.append(seq[t])
                usr.append(u)
                rid.append(r[t])
                if with_seen:
                    seen.append(seq[:t])
        if not hist:
            return Samples(torch.zeros((0, L), dtype=torch.long), torch.zeros(0, dtype=torch.long),
                           torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                           torch.zeros(0, dtype=torch.long),
                           torch.zeros((0, 1), dtype=torch.long) if with_seen else None)
        seen_t = None
        if with_seen:
            width = max(1, max(x.size for x in seen))
            seen_np = np.zeros((len(seen), width), dtype=np.int64)
            for j, x in enumerate(seen):
                seen_np[j, :x.size] = x
            seen_t = torch.from_numpy(seen_np)
        return Samples(torch.from_numpy(np.stack(hist)), torch.tensor(lens, dtype=torch.long),
                       torch.tensor(tgt, dtype=torch.long), torch.tensor(usr, dtype=torch.long),
                       torch.tensor(rid, dtype=torch.long), seen_t)

    def popularity(self) -> torch.Tensor:
        """[N + 1] float32 interaction counts over the training interactions (index 0, padding, is 0): the training
        users' sequences (user_split), or every sequence without its last two items (leave_one_out)."""
        if self.protocol == "leave_one_out":
            off = self._offsets()
            counts = np.diff(off)
            pos = np.arange(self.inter_item.numel()) - np.repeat(off[:-1], counts)
            keep = torch.from_numpy(pos < np.repeat(counts - 2, counts))
            return torch.bincount(self.inter_item[keep], minlength=self.n_items + 1).to(torch.float32)
        train_users = torch.from_numpy(np.flatnonzero(self.user_split.numpy() == 0))
        mask = torch.isin(self.inter_user, train_users)
        return torch.bincount(self.inter_item[mask], minlength=self.n_items + 1).to(torch.float32)

    def stats(self) -> dict:
        counts = np.diff(self._offsets())
        if self.protocol == "leave_one_out":
            n_train = int((counts >= 4).sum())
            n_valid, n_test = int((counts >= 3).sum()), int((counts >= 2).sum())
            n_samples = int(np.clip(counts - 3, 0, None).sum())
        else:
            split = self.user_split.numpy()
            n_train, n_valid = int(((split == 0) & (counts >= 2)).sum()), int(((split == 1) & (counts >= 2)).sum())
            n_test = int(((split == 2) & (counts >= 2)).sum())
            n_samples = int(np.clip(counts[split == 0] - 1, 0, None).sum())
        return {"n_users": self.n_users, "n_items": self.n_items, "n_interactions": int(self.inter_item.numel()),
                "n_train_users": n_train, "n_valid_users": n_valid, "n_test_users": n_test,
                "n_train_samples": n_samples, "max_history": self.max_history, "seed": self.seed,
                "source": self.source, "protocol": self.protocol}

    # ---------------------------------------------------------------------------------------- serialisation
    def to_bytes(self) -> bytes:
        meta = {"format": DATASET_FORMAT, "item_ids": self.item_ids, "user_ids": self.user_ids,
                "max_history": self.max_history, "seed": self.seed, "source": self.source, "protocol": self.protocol}
        tensors = {"inter_user": self.inter_user, "inter_item": self.inter_item, "inter_time": self.inter_time,
                   "inter_rating": self.inter_rating, "record_id": self.record_id, "user_split": self.user_split}
        return st_save({k: t.contiguous() for k, t in tensors.items()}, metadata={"praxon": json.dumps(meta)})

    @classmethod
    def from_bytes(cls, blob: bytes, field: str = "dataset_artifact_id") -> "Dataset":
        bad = InvalidArgument(field, "the artifact is not a praxon recommendation dataset")
        try:
            tensors = st_load(blob)
            n = int.from_bytes(blob[:8], "little")
            header = json.loads(blob[8:8 + n])
        except (SafetensorError, ValueError):
            raise bad from None
        raw = header.get("__metadata__", {}).get("praxon")
        if raw is None:
            raise bad
        meta = json.loads(raw)
        if meta.get("format") != DATASET_FORMAT:
            raise InvalidArgument(field, f"unsupported dataset format {meta.get('format')!r}")
        needed = {"inter_user", "inter_item", "inter_time", "inter_rating", "record_id", "user_split"}
        if not needed <= tensors.keys():
            raise bad
        return cls(item_ids=list(meta["item_ids"]), user_ids=list(meta["user_ids"]),
                   max_history=int(meta["max_history"]), seed=int(meta["seed"]), source=str(meta["source"]),
                   protocol=str(meta.get("protocol", "user_split")), **{k: tensors[k] for k in needed})


def recbole_time_key(t: np.ndarray) -> np.ndarray:
    """RecBole's ordering key for the timestamps `t` (RecBole v1.2.1, github.com/RUCAIBox/RecBole at tag v1.2.1):
    recbole/data/dataset/dataset.py Dataset._normalize() min-max normalises every float field in float64,
    (x - min) / (max - min), or sets it to 1.0 when all values are equal (normalize_all: True in
    recbole/properties/dataset/ml-100k.yaml; the timestamp is `timestamp:float`); _dataframe_to_interaction() then
    stores it as torch.FloatTensor (float32); Dataset.build() with eval_args.order 'TO' (which SequentialDataset.build
    requires) calls Interaction.sort(by=time_field) in recbole/data/interaction.py, np.argsort(key, kind="stable")
    over every interaction in file order; leave_one_out() then groups the sorted rows by user in that order
    (_grouped_index) and takes each user's last row for test and the one before for validation
    (_split_index_by_leave_one_out). A user's sequence is therefore ordered by this key, ties in file order."""
    t = np.asarray(t, dtype=np.float64)
    if t.size == 0:
        return t.astype(np.float32)
    mx, mn = t.max(), t.min()
    norm = np.ones_like(t) if mx == mn else (t - mn) / (mx - mn)
    return norm.astype(np.float32)  # round to nearest, as torch.FloatTensor(float64 array) does


def build_dataset(df: pd.DataFrame, *, seed: int = 0, max_history: int = 10,
                  split: tuple[float, float, float] = (0.8, 0.1, 0.1), source: str = "upload",
                  protocol: str = "user_split") -> Dataset:
    """Index ids, order each user's interactions by time (stable: ties keep file order; leave_one_out: by RecBole's
    float32 normalised time, recbole_time_key) and apply the split protocol (user_split: a seeded 8/1/1 user
    permutation; leave_one_out: the last two items of every user).
    `df` is what read_interactions (or a loader) returns."""
    if max_history < 1 or max_history > 200:
        raise InvalidArgument("max_history", "must be in 1..200")
    if protocol not in PROTOCOLS:
        raise InvalidArgument("protocol", f"one of {', '.join(PROTOCOLS)}")
    if len(split) != 3 or min(split) < 0 or not math.isclose(sum(split), 1.0, abs_tol=1e-6) or split[0] <= 0:
        raise InvalidArgument("split", "three non-negative fractions summing to 1, train > 0")
    item_ids = sorted(df["item"].unique().tolist(), key=_id_sort_key)
    user_ids = sorted(df["user"].unique().tolist(), key=_id_sort_key)
    item_index = {r: i + 1 for i, r in enumerate(item_ids)}
    user_index = {r: u for u, r in enumerate(user_ids)}
    u = df["user"].map(user_index).to_numpy(np.int64)
    it = df["item"].map(item_index).to_numpy(np.int64)
    t = df["timestamp"].to_numpy(np.float64)
    rec = df["record_id"].to_numpy(np.int64)
    rating = df["rating"].to_numpy(np.float64) if "rating" in df else np.full(len(df), np.nan)
    order = np.lexsort((rec, recbole_time_key(t) if protocol == "leave_one_out" else t, u))
    counts = np.bincount(u, minlength=len(user_ids))
    eligible = np.flatnonzero(counts >= 2)
    rng = np.random.default_rng(seed)
    perm = eligible[rng.permutation(eligible.size)]
    n_valid = int(round(split[1] * eligible.size))
    n_test = int(round(split[2] * eligible.size))
    user_split = np.zeros(len(user_ids), dtype=np.int8)
    if protocol == "user_split":
        user_split[perm[:n_valid]] = 1
        user_split[perm[n_valid:n_valid + n_test]] = 2
    return Dataset(item_ids=[str(x) for x in item_ids], user_ids=[str(x) for x in user_ids],
                   inter_user=torch.from_numpy(u[order].copy()), inter_item=torch.from_numpy(it[order].copy()),
                   inter_time=torch.from_numpy(t[order].copy()),
                   inter_rating=torch.from_numpy(rating[order].astype(np.float32)),
                   record_id=torch.from_numpy(rec[order].copy()), user_split=torch.from_numpy(user_split),
                   max_history=max_history, seed=seed, source=source, protocol=protocol)


def _id_sort_key(x: str) -> tuple[int, int, str]:
    """Numeric-looking ids sort numerically, then the rest as text: a stable, readable index order."""
    s = str(x)
    return (0, int(s), "") if s.isdigit() and len(s) < 19 else (1, 0, s)
