"""The training loop of every model kind, as a step protocol (services.common.jobcontext.Steps): one step = one epoch
(shuffled mini-batches, then validation), early stopping with patience on a chosen validation metric, best-state
tracking, full-state checkpoints and deterministic resume. The job (jobs.py) runs it with run_steps, which owns
resume, cancellation and progress; benchmarks run it with `fit`, without a job context.

Optimisers: "adamw" (the official PreferDiff trainer: AdamW, no LR schedule, no clipping) or "adam" (RecBole's
learner). Training samples: every next item ("every_prefix", RecBole) or one per user ("last", the official
PreferDiff trainer). Evaluation reports unmasked and masked metrics from the same queries (metrics.evaluate_both).

Determinism: parameters are initialised after torch.manual_seed(seed); epoch e shuffles with its own generator seeded
from (seed, e); the draws inside the loss (t, noise, null mask, dropout) use the global torch RNG (and CUDA's on a GPU),
whose state is checkpointed at each epoch boundary; evaluation samples from a generator seeded from the seed alone,
so it never touches the training stream. A run resumed from an epoch checkpoint therefore replays exactly the epochs
an uninterrupted run would have (same device, process settings and thread count)."""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from services.common.errors import FailedPrecondition
from services.recommendation.data import Dataset, Samples
from services.recommendation.metrics import KS, evaluate_both
from services.recommendation.model import ModelConfig, build_model
from services.recommendation.params import TrainParams

CHECKPOINT_FORMAT = 2
EVAL_SEED_OFFSET = 7919
TrainConfig = TrainParams  # the training loop's configuration is the job's parameter model


def model_config(cfg: TrainParams, n_items: int, max_history: int) -> ModelConfig:
    std = cfg.emb_init_std or (1.0 if cfg.model_kind in ("preferdiff", "dreamrec") else 0.0)
    return ModelConfig(kind=cfg.model_kind, n_items=n_items, dim=cfg.dim, max_history=max_history, heads=cfg.heads,
                       layers=cfg.layers, inner=cfg.inner, dropout=cfg.dropout, emb_init_std=std,
                       timesteps=cfg.timesteps, sample_steps=cfg.sample_steps, guidance_w=cfg.guidance_w,
                       p_null=cfg.p_null, lam=cfg.lam, gamma=cfg.gamma, loss_type=cfg.loss_type)


def resolve_device(name: str) -> torch.device:
    """"auto": CUDA when this worker has a GPU, else the CPU; "cuda" without one is FAILED_PRECONDITION."""
    if name == "cuda" and not torch.cuda.is_available():
        raise FailedPrecondition("device 'cuda' was asked for but this worker has no GPU", reason="NO_GPU")
    return torch.device("cuda" if name != "cpu" and torch.cuda.is_available() else "cpu")


@dataclass
class TrainResult:
    kind: str
    model: torch.nn.Module | None  # None for popularity; on the CPU
    model_config: ModelConfig | None
    popularity: torch.Tensor  # [N + 1]
    best_epoch: int
    epochs_run: int
    valid_metrics: dict[str, float]
    test_metrics: dict[str, float]
    protocol: str = "user_split"
    seconds_to_best: float = 0.0
    history: list[dict[str, float]] = field(default_factory=list)


def _trim(s: Samples, L: int) -> Samples:
    """Keep the last L items of each history (right-padded)."""
    if s.history.shape[1] == L:
        return s
    if s.history.shape[1] < L:
        pad = torch.zeros(s.history.shape[0], L - s.history.shape[1], dtype=torch.long)
        return Samples(torch.cat([s.history, pad], 1), s.lengths, s.target, s.user, s.target_record_id, s.seen)
    n = s.lengths.clamp(max=L)
    start = (s.lengths - n).unsqueeze(1)
    idx = (start + torch.arange(L).unsqueeze(0)).clamp(max=s.history.shape[1] - 1)
    h = s.history.gather(1, idx)
    h = torch.where(torch.arange(L).unsqueeze(0) < n.unsqueeze(1), h, torch.zeros_like(h))
    return Samples(h, n, s.target, s.user, s.target_record_id, s.seen)


def evaluate_model(model: torch.nn.Module | None, popularity: torch.Tensor, samples: Samples, *, seed: int,
                   batch_size: int = 1024, ks: tuple[int, ...] = KS) -> dict[str, float]:
    """Unmasked and (when the samples carry `seen`) masked Recall/NDCG@ks over the full catalogue."""
    if model is None:
        table = popularity[1:].unsqueeze(1)
        return evaluate_both(lambda h, n: torch.ones(h.shape[0], 1), table, samples.history, samples.lengths,
                             samples.target, samples.seen, ks=ks, batch_size=batch_size)
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET)
    try:
        with torch.no_grad():
            table = model.item_table().detach()
            return evaluate_both(lambda h, n: model.queries(h, n, generator=gen), table, samples.history,
                                 samples.lengths, samples.target, samples.seen, ks=ks, batch_size=batch_size)
    finally:
        model.train(was_training)


class TrainRun:
    """The Steps of one training run (total = epochs; early stopping shortens it). `dataset` may be given now or
    read in setup (the job reads it from its artifact).

    In a job (a ctx), the time left shows from the first batches: after FIRST_REPORT_BATCHES batches of an epoch,
    then every PROGRESS_EVERY_S seconds, a progress event "epoch e/E: batch b/B" carries `eta_s` (the CLI shows it as
    "ETA ..."), and so does each epoch's own event. Until an epoch has been timed whole, an epoch is estimated as its
    batches at the pace measured so far plus a validation pass scaled from one timed on EVAL_PROBE validation samples
    (for the diffusion models, sampling makes validation most of an epoch); afterwards as the mean measured epoch.
    Early stopping may end the run sooner: the ETA is for every epoch left."""

    FIRST_REPORT_BATCHES = 3
    PROGRESS_EVERY_S = 15.0
    EVAL_PROBE = 32
    progress_span = (0.0, 0.99)  # run_steps' default: where a step's own progress events fall

    def __init__(self, cfg: TrainParams, dataset: Dataset | None = None):
        self.cfg = cfg
        self.dataset = dataset
        self.total = 0 if cfg.model_kind == "popularity" else cfg.epochs
        self.ctx: Any = None
        self.stopped = False

    # -- Steps protocol
    def setup(self, ctx: Any = None) -> None:
        cfg, ds = self.cfg, self.dataset
        assert ds is not None, "TrainRun needs a dataset"
        self.ctx = ctx
        self.device = resolve_device(cfg.device)
        self.L = cfg.max_history or ds.max_history
        self.train_s = _trim(ds.samples("train", train_samples=cfg.train_samples), self.L)
        self.valid_s = _trim(ds.samples("valid", with_seen=True), self.L)
        self.test_s = _trim(ds.samples("test", with_seen=True), self.L)
        if len(self.train_s) < 2:
            raise FailedPrecondition("the dataset has fewer than 2 training samples", reason="DATASET_TOO_SMALL")
        self.popularity = ds.popularity()
        self.model = None
        self.epoch, self.best_score, self.best_epoch, self.bad_epochs = 0, -1.0, 0, 0
        self.history: list[dict[str, float]] = []
        self.train_seconds, self.seconds_to_best = 0.0, 0.0
        self.eval_estimate_s: float | None = None
        if cfg.model_kind == "popularity":
            return
        torch.manual_seed(cfg.seed)
        self.mcfg = model_config(cfg, ds.n_items, self.L)
        self.model = build_model(self.mcfg).to(self.device)
        opt_cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
        self.opt = opt_cls(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.best_state = copy.deepcopy(self.model.state_dict())
        self.dev_train = Samples(*(t.to(self.device) for t in (self.train_s.history, self.train_s.lengths,
                                                                 self.train_s.target, self.train_s.user,
                                                                 self.train_s.target_record_id)))

    def step(self, i: int) -> dict[str, float]:
        import time

        cfg, model = self.cfg, self.model
        t0 = time.perf_counter()
        model.train()
        n = len(self.train_s)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(cfg.seed * 1_000_003 + i)).to(self.device)
        total, batches = 0.0, 0
        n_batches = n // cfg.batch_size + (1 if n % cfg.batch_size >= 2 else 0)  # (a last batch of 1 is skipped)
        reported_at: float | None = None
        part_sums: dict[str, float] = {}
        for bi, lo in enumerate(range(0, n, cfg.batch_size)):
            idx = perm[lo:lo + cfg.batch_size]
            if idx.numel() < 2:
                continue  # centroid negatives need two targets
            if bi and bi % cfg.cancel_check_every == 0 and self.ctx is not None:
                self.ctx.check_cancelled()
            b = self.dev_train.subset(idx)
            loss, parts = model.loss(b.history, b.lengths, b.target)
            for k_, v_ in parts.items():
                part_sums[k_] = part_sums.get(k_, 0.0) + v_
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            self.opt.step()
            total += float(loss.detach())
            batches += 1
            if self.ctx is not None and batches < n_batches:
                now = time.perf_counter()
                if batches == self.FIRST_REPORT_BATCHES or (
                        reported_at is not None and now - reported_at >= self.PROGRESS_EVERY_S):
                    self._report_batches(i, batches, n_batches, now - t0, total / batches)
                    reported_at = time.perf_counter()
        self.epoch = i + 1
        valid = evaluate_model(model, self.popularity, self.valid_s, seed=cfg.seed, batch_size=cfg.eval_batch_size)
        self.train_seconds += time.perf_counter() - t0
        score = valid[cfg.early_stop_metric]
        if score > self.best_score:
            self.best_score, self.best_epoch, self.bad_epochs = score, self.epoch, 0
            self.best_state = copy.deepcopy(model.state_dict())
            self.seconds_to_best = self.train_seconds
        else:
            self.bad_epochs += 1
        self.stopped = self.bad_epochs >= cfg.patience
        if self.stopped:
            self.total = self.epoch  # run_steps stops here
        rec = {"epoch": float(self.epoch), "loss": total / max(batches, 1), "valid_recall_5": valid["recall@5"],
               "valid_ndcg_10": valid["ndcg@10"], "valid_masked_ndcg_10": valid["masked_ndcg@10"]}
        rec.update({k_: v_ / max(batches, 1) for k_, v_ in part_sums.items() if k_ != "loss"})
        self.history.append(rec)
        eta = self.train_seconds / self.epoch * max(0, self.total - self.epoch)  # the mean epoch, every epoch left
        return {**rec, "best_epoch": float(self.best_epoch), "eta_s": eta}

    def _report_batches(self, i: int, done: int, n_batches: int, elapsed: float, loss: float) -> None:
        """A progress event inside epoch i: batches done, the loss so far and the time left (eta_s)."""
        per_batch = elapsed / done
        if self.epoch > 0:  # epochs timed whole (this process, or before a resume: train_seconds is checkpointed)
            epoch_s = self.train_seconds / self.epoch
            eval_s = 0.0 if self.eval_estimate_s is None else self.eval_estimate_s
        else:
            eval_s = self._estimate_eval_seconds()
            epoch_s = per_batch * n_batches + eval_s
        eta = per_batch * (n_batches - done) + eval_s + epoch_s * max(0, self.total - i - 1)
        lo, hi = self.progress_span
        self.ctx.progress(lo + (hi - lo) * (i + done / n_batches) / max(self.total, 1),
                          f"epoch {i + 1}/{self.total}: batch {done}/{n_batches}", eta_s=eta, loss=loss)

    def _estimate_eval_seconds(self) -> float:
        """Seconds one validation pass will take, from one timed on the first EVAL_PROBE validation samples (once
        per run; evaluation draws from its own generator, so training is unchanged)."""
        import time

        if self.eval_estimate_s is None:
            k = min(self.EVAL_PROBE, len(self.valid_s))
            if k == 0:
                self.eval_estimate_s = 0.0
            else:
                rng = torch.get_rng_state()  # (and the global stream stays where training left it)
                t0 = time.perf_counter()
                try:
                    evaluate_model(self.model, self.popularity, self.valid_s.subset(torch.arange(k)),
                                   seed=self.cfg.seed, batch_size=self.cfg.eval_batch_size)
                finally:
                    torch.set_rng_state(rng)
                self.eval_estimate_s = (time.perf_counter() - t0) * len(self.valid_s) / k
        return self.eval_estimate_s

    def state(self) -> dict[str, Any]:
        st = {"format": CHECKPOINT_FORMAT, "config": self.cfg.training_fields(), "n_items": self.dataset.n_items,
              "protocol": self.dataset.protocol, "epoch": self.epoch, "total": self.total, "stopped": self.stopped,
              "model": self.model.state_dict() if self.model is not None else {},
              "optim": self.opt.state_dict() if self.model is not None else {},
              "best_model": self.best_state if self.model is not None else {}, "best_score": self.best_score,
              "best_epoch": self.best_epoch, "bad_epochs": self.bad_epochs, "history": self.history,
              "seconds": [self.train_seconds, self.seconds_to_best], "rng": torch.get_rng_state()}
        if self.device.type == "cuda":
            st["cuda_rng"] = torch.cuda.get_rng_state()
        return st

    def load_state(self, st: dict[str, Any]) -> None:
        if st.get("format") != CHECKPOINT_FORMAT or st.get("config") != self.cfg.training_fields() \
                or st.get("n_items") != self.dataset.n_items or st.get("protocol") != self.dataset.protocol:
            raise FailedPrecondition("the checkpoint belongs to a run with other parameters or data",
                                     reason="CHECKPOINT_MISMATCH")
        if self.model is not None:
            self.model.load_state_dict(st["model"])
            self.opt.load_state_dict(st["optim"])
            self.best_state = st["best_model"]
        self.epoch, self.total, self.stopped = int(st["epoch"]), int(st["total"]), bool(st["stopped"])
        self.best_score, self.best_epoch, self.bad_epochs = float(st["best_score"]), int(st["best_epoch"]), \
            int(st["bad_epochs"])
        self.history = [dict(h) for h in st["history"]]
        self.train_seconds, self.seconds_to_best = (float(x) for x in st["seconds"])
        torch.set_rng_state(st["rng"])
        if "cuda_rng" in st and self.device.type == "cuda":
            torch.cuda.set_rng_state(st["cuda_rng"])

    def finish(self) -> TrainResult:
        """The best epoch's model, evaluated on validation and test (both masked and unmasked)."""
        cfg = self.cfg
        kw = dict(seed=cfg.seed, batch_size=cfg.eval_batch_size)
        if self.model is None:
            valid = evaluate_model(None, self.popularity, self.valid_s, **kw)
            test = evaluate_model(None, self.popularity, self.test_s, **kw)
            return TrainResult("popularity", None, None, self.popularity, 0, 0, valid, test, self.dataset.protocol)
        self.model.load_state_dict(self.best_state)
        self.model.eval()
        valid = evaluate_model(self.model, self.popularity, self.valid_s, **kw)
        test = evaluate_model(self.model, self.popularity, self.test_s, **kw)
        return TrainResult(cfg.model_kind, self.model.cpu(), self.mcfg, self.popularity, self.best_epoch, self.epoch,
                           valid, test, self.dataset.protocol, self.seconds_to_best, self.history)


def fit(cfg: TrainParams, dataset: Dataset,
        on_epoch: Callable[[int, dict[str, float]], None] | None = None) -> TrainResult:
    """Run a TrainRun to its end in this process (benchmarks, tests, the sweep): no checkpoints, no job."""
    run = TrainRun(cfg, dataset)
    run.setup(None)
    i = 0
    while i < run.total:
        metrics = run.step(i)
        i += 1
        if on_epoch is not None:
            on_epoch(i, metrics)
    return run.finish()


def train(cfg: TrainParams, dataset: Dataset) -> TrainResult:
    """fit without a callback (kept for callers of the old name)."""
    return fit(cfg, dataset)
