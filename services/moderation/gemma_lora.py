"""The LoRA-tuned Gemma guard (kind "gemma_lora"): the gemma_frozen guard (gemma_guard.py) whose `lora_layers`
decoder layers up to the read-out layer `layer` are tuned with LoRA adapters together with the heads.

Algorithm (measured against gemma_frozen in benchmarks/moderation/gemma_lora.py): every nn.Linear of decoder layers
lo+1..layer (lo = layer - lora_layers, 1-based) becomes W x + (alpha / r) B (A x), W frozen, A Kaiming-uniform
(seeded), B = 0, so training starts exactly at the frozen guard. The heads start from the Newton heads of the frozen
features (the gemma_frozen job's steps) and train with the adapters by AdamW (adapters at `lr`, heads at `head_lr`)
on mini-batch estimates of the same objective (guard.frozen_linear_objective), with the frozen guard's
standardisation (mu, sd of the frozen train features) kept fixed. The hidden states below the tuned layers do not
change, so they are computed once per process and cached: an epoch runs only the tuned layers (TopLayers).

The registered guard is a GemmaGuard with config kind "gemma_lora": the adapters are merged into the base weights
(W + (alpha / r) B A, merge_lora), so its backbone is a plain Gemma whose layers lo+1..layer carry the merged weights
and serving runs the gemma_frozen code unchanged; config["backbone"]["lora"] records the settings and the digest of
the merged tensors (part of the guard's fingerprint)."""
from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from services.common.errors import FailedPrecondition
from services.moderation.gemma_guard import (
    GemmaBackbone,
    GemmaGuard,
    GemmaGuardTraining,
    gemma_config,
    render,
)
from services.moderation.guard import LinearHeads, Targets, frozen_linear_objective

KIND = "gemma_lora"
_CACHE_BATCH = 16


# ------------------------------------------------------------------------------------------------ adapters
class LoRALinear(torch.nn.Module):
    """y = W x + (alpha / r) * B (A x), W frozen; A ~ Kaiming-uniform as in the LoRA paper's code, B = 0."""

    def __init__(self, base: torch.nn.Linear, rank: int, alpha: float, gen: torch.Generator):
        super().__init__()
        self.base, self.scale = base, alpha / rank
        self.A = torch.nn.Parameter(torch.empty(rank, base.in_features))
        torch.nn.init.kaiming_uniform_(self.A, a=math.sqrt(5), generator=gen)
        self.B = torch.nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x):
        return self.base(x) + self.scale * ((x @ self.A.T) @ self.B.T)


def add_lora(layers, rank: int, alpha: float, seed: int) -> list[torch.nn.Parameter]:
    """Wrap every nn.Linear inside `layers` in a LoRALinear (in place); the adapters' parameters, A then B per
    linear, in module order (the optimizer's order, so a checkpoint's optimizer state lines up)."""
    gen = torch.Generator().manual_seed(seed)
    params = []
    for layer in layers:
        for parent in list(layer.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.Linear):
                    lora = LoRALinear(child, rank, alpha, gen)
                    setattr(parent, name, lora)
                    params += [lora.A, lora.B]
    return params


def lora_modules(model: torch.nn.Module) -> dict[str, LoRALinear]:
    """The adapters of a model by qualified module name."""
    return {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}


def merge_lora(model: torch.nn.Module) -> list[str]:
    """Fold every adapter into its base Linear (W <- W + (alpha / r) B A) and put the plain Linear back in its
    place, so the model is the unchanged architecture again (serving needs no LoRA code). Returns the names of the
    merged weights as they appear in model.state_dict() (e.g. "model.layers.1.mlp.up_proj.weight")."""
    merged = []
    for name, lora in lora_modules(model).items():
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        base = lora.base
        with torch.no_grad():
            delta = lora.scale * (lora.B.to(torch.float64) @ lora.A.to(torch.float64))
            base.weight.copy_((base.weight.to(torch.float64) + delta).to(base.weight.dtype))
        setattr(parent, child, base)
        merged.append(f"{name}.weight")
    return merged


class TopLayers:
    """Gemma's decoder layers lo+1..hi (1-based) run on cached states after layer lo, as Gemma3TextModel.forward
    runs them (its causal / sliding masks and rotary embeddings per layer type)."""

    def __init__(self, model, lo: int, hi: int):
        self.base = getattr(model, "model", model)
        self.lo, self.hi = lo, hi

    def __call__(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

        cfg = self.base.config
        pos = torch.arange(h.shape[1])[None]
        kw = {"config": cfg, "inputs_embeds": h, "attention_mask": mask, "cache": None, "position_ids": pos}
        masks = {"full_attention": create_causal_mask(**kw), "sliding_attention": create_sliding_window_causal_mask(**kw)}
        pe = {t: self.base.rotary_emb(h, pos, t) for t in set(cfg.layer_types)}
        for i in range(self.lo, self.hi):
            t = cfg.layer_types[i]
            h = self.base.layers[i](h, attention_mask=masks[t], position_embeddings=pe[t], position_ids=pos)
        return h


def pad(states: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad per-row states [T_i, H] to [N, T, H] with their attention mask [N, T]."""
    n, hdim = max(s.shape[0] for s in states), states[0].shape[1]
    h = torch.zeros(len(states), n, hdim, dtype=states[0].dtype)
    m = torch.zeros(len(states), n, dtype=torch.long)
    for i, s in enumerate(states):
        h[i, :s.shape[0]], m[i, :s.shape[0]] = s, 1
    return h, m


def states_below(backbone: GemmaBackbone, rendered: Sequence[str], lo: int, *,
                 check: Callable[[], None] | None = None) -> list[torch.Tensor]:
    """Per row, the hidden states entering decoder layer lo+1 (the output of layer lo; lo = 0: the scaled token
    embeddings) over its real tokens, tokenised as GemmaBackbone does. Batches of 16, right-padded (a causal LM's
    real tokens never attend to the padding after them)."""
    base = getattr(backbone.model, "model", backbone.model)
    out: list[torch.Tensor] = []

    class _Stop(Exception):
        pass

    got: dict[str, torch.Tensor] = {}

    def hook(_m, args, kwargs):
        got["h"] = args[0] if args else kwargs["hidden_states"]
        raise _Stop

    handle = base.layers[lo].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        for k in range(0, len(rendered), _CACHE_BATCH):
            if check is not None:
                check()
            enc = backbone.tokenizer(list(rendered[k:k + _CACHE_BATCH]), return_tensors="pt", padding=True,
                                     truncation=True, max_length=backbone.max_tokens)
            try:
                with torch.no_grad():
                    base(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], use_cache=False)
            except _Stop:
                pass
            m = enc["attention_mask"]
            out += [got["h"][i, :int(m[i].sum())].detach().clone() for i in range(len(m))]
    finally:
        handle.remove()
    return out


# ------------------------------------------------------------------------------------------------ training
class LoRATuner:
    """The adapters of decoder layers lo+1..layer and the heads, trained by AdamW on mini-batches of the training
    rows. Deterministic: eval mode (no dropout), seeded adapter init, epoch e shuffled with seed (seed, e) as
    guard.FinetuneTrainer does. The cache of states below the tuned layers is built on first use (after a resume
    too: it is never checkpointed). Checkpoint with state() / load_state()."""

    def __init__(self, backbone: GemmaBackbone, heads: LinearHeads, rows: Sequence[Any], mu: np.ndarray,
                 sd: np.ndarray, *, lora_layers: int, rank: int, alpha: float, l2: float, lr: float, head_lr: float,
                 batch_size: int, seed: int, pool: str):
        self.backbone, self.model = backbone, backbone.model
        self.lo, self.hi = backbone.layer - lora_layers, backbone.layer
        for p in self.model.parameters():
            p.requires_grad_(False)
        base = getattr(self.model, "model", self.model)
        self.params = add_lora(base.layers[self.lo:self.hi], rank, alpha, seed)
        self.top = TopLayers(self.model, self.lo, self.hi)
        self.heads = heads.clone()
        self.head_params = [getattr(self.heads, k).requires_grad_(True) for k in LinearHeads.NAMES]
        self.opt = torch.optim.AdamW([{"params": self.params, "lr": lr, "weight_decay": 0.0},
                                      {"params": self.head_params, "lr": head_lr, "weight_decay": 0.0}])
        self.rendered = [render(r.text, r.role, r.prompt) for r in rows]
        self.y = Targets.from_examples(list(rows))
        self.r = torch.tensor([1.0 if r.role == "response" else 0.0 for r in rows], dtype=torch.float64)
        self.has = torch.tensor([1.0 if r.prompt is not None else 0.0 for r in rows], dtype=torch.float64)
        self.mu, self.sd = torch.from_numpy(np.asarray(mu, np.float64)), torch.from_numpy(np.asarray(sd, np.float64))
        self.l2, self.batch_size, self.seed, self.pool = l2, batch_size, seed, pool
        self.cache: list[torch.Tensor] | None = None

    def features(self, ix: Sequence[int]) -> torch.Tensor:
        """phi of training rows `ix` through the tuned layers (differentiable in the adapters), as
        gemma_guard.pair_features computes it from the pooled states."""
        h, m = pad([self.cache[i] for i in ix])
        out = self.top(h, m).to(torch.float64)
        mf = m.to(torch.float64)
        if self.pool == "mean":
            v = (out * mf[..., None]).sum(1) / mf.sum(1, keepdim=True)
        else:
            v = out[torch.arange(out.shape[0]), m.sum(1) - 1]
        z = (v - self.mu) / (self.sd * math.sqrt(v.shape[1]))
        ix_t = torch.as_tensor(np.asarray(ix))
        return torch.cat([z, self.r[ix_t][:, None], self.has[ix_t][:, None]], 1)

    def train_epoch(self, epoch: int, check: Callable[[], None] | None = None) -> float:
        """One pass over the training rows; the mean mini-batch loss. `check` runs before every batch (cancel)."""
        if self.cache is None:
            self.cache = states_below(self.backbone, self.rendered, self.lo, check=check)
        n = len(self.rendered)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed * 100_003 + epoch)).numpy()
        total = 0.0
        for k in range(0, n, self.batch_size):
            if check is not None:
                check()
            ix = order[k:k + self.batch_size]
            loss = frozen_linear_objective(self.heads, self.features(ix), self.y.subset(ix), self.l2)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            total += float(loss.detach()) * len(ix)
        return total / n

    def state(self) -> dict[str, Any]:
        lora = {}
        for name, m in lora_modules(self.model).items():
            lora[name + ".A"], lora[name + ".B"] = m.A.detach().clone(), m.B.detach().clone()
        return {"lora": lora, "heads": {k: v.detach().clone() for k, v in self.heads.tensors("").items()},
                "opt": self.opt.state_dict()}

    def load_state(self, st: dict[str, Any]) -> None:
        with torch.no_grad():
            for name, m in lora_modules(self.model).items():
                m.A.copy_(st["lora"][name + ".A"])
                m.B.copy_(st["lora"][name + ".B"])
            for k in LinearHeads.NAMES:
                getattr(self.heads, k).copy_(st["heads"][k])
        self.opt.load_state_dict(st["opt"])

    def trained_heads(self) -> LinearHeads:
        return LinearHeads(**{k: getattr(self.heads, k).detach().clone() for k in LinearHeads.NAMES})


class GemmaLoRATraining(GemmaGuardTraining):
    """moderation.train_guard with kind "gemma_lora": gemma_frozen's steps (step 0: the frozen features and their
    standardisation; then Newton to the frozen heads, the warm start), then one LoRA epoch a step. The checkpoint
    carries the adapters, the heads and the AdamW state, so a killed job resumes from its last finished epoch."""

    def __init__(self, p, train, val, digest):
        super().__init__(p, train, val, digest)
        self.epochs = p.epochs
        self.tuner: LoRATuner | None = None

    def _tuner(self) -> LoRATuner:
        p = self.p
        return LoRATuner(self.backbone, self.heads, self.train, self.mu, self.sd, lora_layers=p.lora_layers,
                         rank=p.lora_rank, alpha=p.lora_alpha, l2=p.l2, lr=p.lr, head_lr=p.head_lr,
                         batch_size=p.batch_size, seed=p.seed, pool=p.pool)

    def step(self, i: int) -> dict[str, float] | None:
        if i <= self.newton:   # features, then the Newton iterations (the frozen heads)
            return super().step(i)
        if self.tuner is None:
            self.tuner = self._tuner()
        return {"loss": self.tuner.train_epoch(i - 1 - self.newton, check=self.ctx.check_cancelled)}

    def state(self) -> dict[str, Any]:
        st = super().state()
        if self.tuner is not None:
            st["lora"] = self.tuner.state()
        return st

    def load_state(self, st: dict[str, Any]) -> None:
        super().load_state(st)
        if "lora" in st:
            self.tuner = self._tuner()
            self.tuner.load_state(st["lora"])

    def result(self, ctx) -> dict[str, Any]:
        p = self.p
        heads = self.tuner.trained_heads()   # (epochs >= 1: the tuner exists, trained or loaded)
        names = merge_lora(self.backbone.model)
        state = self.backbone.model.state_dict()
        missing = [n for n in names if n not in self.bb_tensors]
        if missing:
            raise FailedPrecondition(f"the backbone version has no tensor {missing[0]!r} to merge the adapters into")
        tuned = {n: state[n].detach().clone().to(self.bb_tensors[n].dtype).contiguous() for n in names}
        digest = hashlib.sha256()
        for n in sorted(tuned):
            digest.update(n.encode())
            digest.update(tuned[n].numpy().tobytes())
        bb_tensors = {**self.bb_tensors, **tuned}
        # the served backbone: the merged tensors read back as serving reads them (no LoRA code)
        backbone = GemmaBackbone.from_registry(bb_tensors, self.bb_config, layer=p.layer, max_tokens=p.max_tokens)
        config = gemma_config(self.bb_config, model_version_id=p.backbone_model_version_id, layer=p.layer,
                              pool=p.pool, l2=p.l2, max_tokens=p.max_tokens, hidden_size=backbone.hidden_size,
                              kind=KIND, newton_iterations=self.iters, dataset_sha256=self.digest,
                              n_train=len(self.train), n_validation=len(self.val))
        config["backbone"]["lora"] = {
            "rank": p.lora_rank, "alpha": p.lora_alpha, "layers": list(range(self.tuner.lo + 1, p.layer + 1)),
            "epochs": p.epochs, "lr": p.lr, "head_lr": p.head_lr, "batch_size": p.batch_size, "seed": p.seed,
            "merged_sha256": digest.hexdigest()}
        model = GemmaGuard(heads, config, backbone, self.mu, self.sd, backbone_tensors=bb_tensors)
        val = self.val
        phi_va = model.features([r.text for r in val], [r.role for r in val], [r.prompt for r in val],
                                batched=True) if val else None
        return self._register(ctx, model, phi_va)
