"""moderation.distill: HarmAug distillation of a registered guard into a small student (distill.py, augment.py),
registered as kind "guard.student" (served like a guard: serving.build_guard loads either)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext, run_steps
from services.common.params import parse_params
from services.moderation.jobs.data import load_examples, load_guard, packaged_for, split_examples
from services.moderation.metrics import average_precision, f1_score
from services.moderation.params import DistillParams
from services.moderation.schema import GuardExample

_DIST_CHUNK = 64      # texts the teacher labels a step
_DIST_CKPT_EVERY = 4  # steps per checkpoint (the labels so far are in every one)
_LABELS = ("unsafe", "topics", "severity_ge")


def _unsafe_metrics(prefix: str, p_unsafe: np.ndarray, y: np.ndarray) -> dict[str, float]:
    if len(y) == 0:
        return {}
    out = {f"{prefix}_val_unsafe_f1": f1_score(p_unsafe >= 0.5, y > 0.5),
           f"{prefix}_val_unsafe_auprc": average_precision(p_unsafe, y > 0.5)}
    return {k: float(v) for k, v in out.items() if np.isfinite(v)}


class Distillation:
    """The Steps of one distillation: the teacher's labels for the train + augmented + validation texts, _DIST_CHUNK
    texts a step; then each student run ("plain": the train rows only, as the baseline; "augmented": train +
    augmented rows), an epoch a step. A run that is not the last leaves only its validation metrics behind (its
    weights are not needed); the last one is the registered student."""

    def __init__(self, p: DistillParams, train: list[GuardExample], val: list[GuardExample], aug: list,
                 generator: str, teacher=None):
        from services.moderation.distill import RECOMBINED_SOURCE, StudentConfig, TrainConfig

        self.p, self.train, self.val, self.generator, self.teacher = p, train, val, generator, teacher
        self.texts = [r.text for r in train] + [a.text for a in aug] + [r.text for r in val]
        self.roles = [r.role for r in train] + [a.role for a in aug] + [r.role for r in val]
        self.contexts = [r.prompt for r in train] + [a.prompt for a in aug] + [r.prompt for r in val]
        self.n_tr, self.n_aug = len(train), len(aug)
        self.n_recombined = sum(getattr(a, "source", None) == RECOMBINED_SOURCE for a in aug)
        self.runs = ([("plain", self.n_tr)] if p.train_plain else []) + (
            [("augmented", self.n_tr + self.n_aug)] if self.n_aug else [])
        self.n_chunks = -(-len(self.texts) // _DIST_CHUNK)
        self.total = self.n_chunks + len(self.runs) * p.epochs
        self.scfg = StudentConfig(p.dim, p.hidden, p.buckets, p.min_count, p.max_vocab, p.interaction)
        self.tc = TrainConfig(epochs=p.epochs, batch_size=p.batch_size, lr=p.lr, weight_decay=p.weight_decay,
                              warmup_fraction=p.warmup_fraction, max_norm=p.max_norm, aux_weight=p.aux_weight,
                              seed=p.seed)

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps([self.p.teacher_model_version_id, self.texts, self.roles,
                                          self.contexts]).encode()).hexdigest()

    def message(self, done: int, total: int) -> str:
        if done <= self.n_chunks:
            return "teacher labels"
        run, epoch = divmod(done - 1 - self.n_chunks, self.p.epochs)
        return f"{self.runs[run][0]} student epoch {epoch + 1}"

    def setup(self, ctx: JobContext) -> None:
        if self.teacher is None:
            self.teacher = load_guard(ctx, self.p.teacher_model_version_id)
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in _LABELS}
        self.metrics: dict[str, float] = {}  # of the runs finished before the last
        self.run, self.trainer = -1, None

    def labels(self) -> dict[str, np.ndarray]:
        return {k: np.concatenate(v) for k, v in self.parts.items()}

    def hard_aug(self) -> np.ndarray:
        """The teacher's decisions on the augmented texts: their hard labels."""
        return (self.labels()["unsafe"][self.n_tr:self.n_tr + self.n_aug] > 0.5).astype(np.int64)

    def _start_run(self, run: int) -> None:
        from services.moderation.distill import StudentTrainer, Vocabulary, encode_data

        n_rows = self.runs[run][1]
        texts, roles, tl = self.texts[:n_rows], self.roles[:n_rows], self.labels()
        hard = np.concatenate([np.array([int(r.unsafe) for r in self.train]), self.hard_aug()])[:n_rows]
        vocab = Vocabulary.build(texts, buckets=self.scfg.buckets, min_count=self.scfg.min_count,
                                 max_size=self.scfg.max_vocab)
        self.data = encode_data(vocab, texts, roles, hard, {k: v[:n_rows] for k, v in tl.items()},
                                self.contexts[:n_rows])
        self.run, self.trainer = run, StudentTrainer(vocab, self.scfg, self.tc, n_rows)

    def _val_metrics(self, run: int, student) -> dict[str, float]:
        if not self.val:
            return {}
        pv = student.predict_proba([r.text for r in self.val], [r.role for r in self.val],
                                   [r.prompt for r in self.val])["unsafe"]
        return _unsafe_metrics("plain" if self.runs[run][0] == "plain" else "student", pv,
                               np.array([float(r.unsafe) for r in self.val]))

    def step(self, i: int) -> dict[str, float] | None:
        if i < self.n_chunks:
            s = slice(i * _DIST_CHUNK, (i + 1) * _DIST_CHUNK)
            pr = self.teacher.predict_proba(self.texts[s], self.roles[s], self.contexts[s])
            for k in _LABELS:
                self.parts[k].append(pr[k])
            return None
        run, epoch = divmod(i - self.n_chunks, self.p.epochs)
        if run != self.run:
            self._start_run(run)
        loss = self.trainer.train_epoch(self.data, epoch)
        if epoch + 1 == self.p.epochs and run < len(self.runs) - 1:
            self.metrics.update(self._val_metrics(run, self.trainer.to_student()))
            self.trainer = None
        return {"loss": loss}

    def state(self) -> dict[str, Any]:
        st = {**{k: torch.from_numpy(v) for k, v in self.labels().items()}, "metrics": dict(self.metrics),
              "run": self.run}
        if self.trainer is not None:
            st["trainer"] = self.trainer.state()
        return st

    def load_state(self, st: dict[str, Any]) -> None:
        self.parts = {k: [st[k].numpy()] for k in _LABELS}
        self.metrics = dict(st["metrics"])
        if "trainer" in st:
            self._start_run(int(st["run"]))
            self.trainer.load_state(st["trainer"])
        else:
            self.run = int(st["run"])

    def result(self, ctx: JobContext) -> dict[str, Any]:
        p, val, n_tr, n_aug = self.p, self.val, self.n_tr, self.n_aug
        student = self.trainer.to_student()
        metrics = dict(self.metrics)
        y_val = np.array([float(r.unsafe) for r in val])
        metrics.update(_unsafe_metrics("teacher", self.labels()["unsafe"][n_tr + n_aug:], y_val))
        metrics.update(self._val_metrics(len(self.runs) - 1, student))
        defaults = None
        if val:  # the student's own decision defaults, chosen on the validation split like the teacher's
            from services.moderation.decision import choose_defaults

            pv_all = student.predict_proba([r.text for r in val], [r.role for r in val], [r.prompt for r in val])
            defaults = choose_defaults(pv_all, val, target_false_block_rate=float(
                self.teacher.config.get("decision_defaults", {}).get("target_false_block_rate", 0.05)))
            metrics.update(student_val_default_false_block_rate=defaults["false_block_rate"],
                           student_val_default_recall=defaults["recall"])
        metrics.update(n_train=float(n_tr), n_augment=float(n_aug), n_recombined=float(self.n_recombined),
                       n_validation=float(len(val)),
                       augment_teacher_unsafe_fraction=float(self.hard_aug().mean()) if n_aug else 0.0)
        student.config = {"teacher_model_version_id": p.teacher_model_version_id, "augmented": bool(n_aug),
                          "augment_generator": self.generator if n_aug else None, "n_train": n_tr, "n_augment": n_aug,
                          "n_recombined": self.n_recombined,
                          "train": {k: v for k, v in asdict(self.tc).items()},
                          "loss": "0.5*(CE(hard)+KL(teacher||student)) + aux_weight*BCE(topics,severity; teacher)",
                          **({"decision_defaults": defaults} if defaults else {})}
        t, cfg = student.to_registry()
        info = ctx.register_model(p.model_name, t, kind="guard.student", config=cfg, metrics=metrics,
                                  dataset_artifact_id=p.dataset_artifact_id,
                                  parent_version_ids=[p.teacher_model_version_id])
        ctx.progress(1.0, "registered", **metrics)
        return {"model_version_id": info.model_version_id, "name": info.name,
                "metrics": metrics, "student_fingerprint": student.fingerprint(), "augmented": bool(n_aug)}


def run_distillation(ctx: JobContext, generate=None) -> dict[str, Any]:
    """params: DistillParams. Teacher = the registered guard `teacher_model_version_id`. Steps (Distillation, under
    run_steps): teacher labels for train + augmented + validation texts; the plain student (train rows only) and the
    HarmAug student (train + augmented rows), an epoch a step; F1 / AUPRC (unsafe) of teacher, plain and augmented
    students on the validation split; registers the augmented student (kind "guard.student") with the metrics.
    With a generator in the params, the augmented texts are HarmAug's (instruction, response) pairs written by that
    language model (lm_generator; `generate` replaces its gRPC client in process); else the template grammar.
    cross_pairs more are recombined from the train rows (distill.recombine_pairs: a train request with a train reply
    it was not written for), labelled by the teacher like the generated ones.
    The texts are generated before the steps, with seeded sampling: a resumed job regenerates them, and its
    checkpoint is used only if they came out the same (run_steps' fingerprint covers every text)."""
    from services.moderation.augment import TemplateGenerator
    from services.moderation.distill import RECOMBINED_SOURCE, recombine_pairs

    p = parse_params(DistillParams, ctx.params, prefix="params.")
    teacher = load_guard(ctx, p.teacher_model_version_id)
    # without a dataset: the packaged set a guard of the teacher's kind trains on
    rows = load_examples(ctx, p.dataset_artifact_id, p.format, packaged_for(teacher.config.get("kind")))
    train, val = split_examples(rows, p.validation_fraction)
    if not train:
        raise InvalidArgument("params.dataset_artifact_id", "the dataset has no training rows")
    n_gen = p.effective_n_augment
    client = None
    if p.generator_name is not None and n_gen:
        gen, client = lm_generator(ctx, p, generate)
    else:
        gen = TemplateGenerator()
    try:
        if n_gen:
            ctx.progress(0.0, f"augmenting with {gen.name}")
        aug = gen.generate(n_gen, seed=p.augment_seed, exclude=[r.text for r in rows]) if n_gen else []
    finally:
        if client is not None:
            client.close()
    name = gen.name if p.generator_name is None else f"{gen.name}:{p.generator_name}:{p.generator_version}"
    names = [name] if n_gen else []
    n_cross = p.effective_cross_pairs
    if n_cross:   # train requests x train replies (recombination, no generator): only train rows, never validation
        aug = aug + recombine_pairs(train, n_cross, seed=p.augment_seed)
        names.append(RECOMBINED_SOURCE)
    name = "+".join(names) or name
    job = Distillation(p, train, val, aug, name, teacher)
    return run_steps(ctx, job, checkpoint_every=_DIST_CKPT_EVERY, message=job.message, progress_span=(0.0, 0.95),
                     fingerprint=job.fingerprint())


def lm_generator(ctx: JobContext, p: DistillParams, generate=None):
    """HarmAug's generator over the registered language model the params pin (augment.ChatHarmAugGenerator): its
    two generations go to the generation service over gRPC (jobs.certify_bias.GenerationClient: the job's tenant,
    the pinned version), unless `generate(prompts, seeds) -> texts` is given (in-process use). -> (generator, client
    to close or None)."""
    from services.moderation.augment import CHAT_FORMATS, ChatHarmAugGenerator

    client = None
    if generate is None:
        from services.moderation.jobs.certify_bias import GenerationClient, connect

        fmt = CHAT_FORMATS[p.generator_format]
        stop = sorted({m for m in (fmt.model_end.strip(), fmt.user_start.strip()) if m} | {"\n\n"})
        client = connect(ctx, lambda address, token, timeout_s: GenerationClient(
            address, token, name=p.generator_name, version=p.generator_version,
            expected_version_id=p.generator_model_version_id, max_new_tokens=p.generator_max_new_tokens,
            temperature=p.generator_temperature, top_k=p.generator_top_k, stop=stop, timeout_s=timeout_s,
            concurrency=2 * p.generator_batch))
        generate = client.generate
    gen = ChatHarmAugGenerator(generate, fmt=p.generator_format, shots=p.generator_shots, batch=p.generator_batch)
    return gen, client
