"""The Gemma guard (kind "gemma_frozen"): a pretrained causal LM reads the request and the reply in one pass, the
way BingoGuard's classifier reads the (prompt, response) pair, and the guard's linear heads (guard.py: unsafe,
topics, ordinal severity per topic) read its hidden states.

Rendering (one text per row): a prompt row is "User: {prompt}\\n"; a response row with the prompt it answers is
"User: {prompt}\\nAssistant: {response}\\n"; a response without one is "Assistant: {response}\\n". The backbone is
frozen; the feature of a row is its hidden state after decoder layer `layer` (1-based: the output of the layer-th
decoder layer), pooled over the rendered tokens ("mean") or taken at the last token ("last"), standardised with the
training rows' per-dimension mean and standard deviation and scaled by 1/sqrt(H):

    phi(text, role, prompt) = [ (pool(h_layer) - mu) / (sd * sqrt(H)),  r,  c ]     (D = H + 2)

with r = 1 for a response and c = 1 when a prompt is present. The heads over phi, their objective (Newton's method
to the exact minimum, `guard.frozen_linear_objective`), the decision defaults (decision.choose_defaults), the
decisions, per-tenant thresholds, chunking and streaming are those of the MiniLM guards: only the features differ.
LoRA-tuning of the layers up to `layer` is the kind "gemma_lora" (gemma_lora.py): the same GemmaGuard over a backbone
whose tuned layers carry the merged weights. Not done here: BingoGuard's generative verdict format.

Registered format: the heads' tensors ("heads.*", guard.py), "gemma.mu" and "gemma.sd" [H] (float64) and the
backbone's own tensors under "backbone.<name>" (a self-contained version: serving needs no second registry lookup;
layers above `layer` are kept too, so the backbone is the imported version unchanged). Config: kind, feature_spec,
feature_dim, topics, l2, decision_defaults, and "backbone" {hf (the registry config of the LM version, tokenizer
included), model_version_id, layer, pool, max_tokens}.

Batching: `features(..., batched=False)` encodes each rendered row alone (canonical); the dynamic batcher uses
`predict_proba_batched` (right-padded batches: a causal LM's real tokens never attend to the padding after them, so
scores agree with the canonical ones up to GEMM rounding, decision.SCORE_TOLERANCE)."""
from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.moderation.guard import GuardModel, LinearHeads, context_mask, validate_roles
from services.moderation.params import GEMMA_KINDS
from services.moderation.taxonomy import TOPICS

KIND = "gemma_frozen"
KINDS = GEMMA_KINDS   # gemma_frozen, and gemma_lora (gemma_lora.py): the same guard over LoRA-tuned (merged) layers
FEATURE_SPEC = "lm-pair-render+frozen-layer-pool+standardised+role/v1"
POOLS = ("mean", "last")
DEFAULT_MAX_TOKENS = 256
_BATCH = 16


def render(text: str, role: str, prompt: str | None) -> str:
    if role == "prompt":
        return f"User: {text}\n"
    if prompt is not None:
        return f"User: {prompt}\nAssistant: {text}\n"
    return f"Assistant: {text}\n"


class GemmaBackbone:
    """A frozen causal LM (transformers) cut after decoder layer `layer`, with its tokenizer. hidden(...) returns
    the pooled hidden states of rendered rows, float64 [N, H]. Thread-safe (one forward at a time)."""

    def __init__(self, model: Any, tokenizer: Any, *, layer: int, max_tokens: int = DEFAULT_MAX_TOKENS):
        base = getattr(model, "model", model)
        n = len(base.layers)
        if not 1 <= layer <= n:
            raise InvalidArgument("params.layer", f"must be between 1 and {n} (the backbone's decoder layers)")
        self.model, self.tokenizer, self.layer, self.max_tokens = model.eval(), tokenizer, layer, max_tokens
        self.n_layers, self.hidden_size = n, int(model.config.hidden_size)
        self._lock = threading.Lock()
        tokenizer.padding_side = "right"
        tokenizer.truncation_side = "left"   # a long pair keeps its end: the reply

    @classmethod
    def from_registry(cls, tensors: dict[str, torch.Tensor], config: dict[str, Any], *, layer: int,
                      max_tokens: int = DEFAULT_MAX_TOKENS, field: str = "params.backbone_model_version_id"
                      ) -> GemmaBackbone:
        from services.common import hf

        model, tok = hf.load_model(tensors, config, field=field)
        return cls(model, tok, layer=layer, max_tokens=max_tokens)

    def _states(self, enc: dict[str, torch.Tensor], layers: Sequence[int]) -> list[torch.Tensor]:
        """Hidden states after each decoder layer in `layers` (1-based), one forward stopped after the deepest."""
        base = getattr(self.model, "model", self.model)
        out: dict[int, torch.Tensor] = {}
        stop = max(layers)

        class _Stop(Exception):
            pass

        def hook(i):
            def f(_m, _inp, o):
                out[i] = o[0] if isinstance(o, tuple) else o
                if i == stop:
                    raise _Stop
            return f
        handles = [base.layers[i - 1].register_forward_hook(hook(i)) for i in sorted(set(layers))]
        try:
            with torch.no_grad():
                base(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], use_cache=False)
        except _Stop:
            pass
        finally:
            for h in handles:
                h.remove()
        return [out[i] for i in layers]

    def pooled_many(self, rendered: Sequence[str], specs: Sequence[tuple[int, str]], *, batch_size: int = _BATCH
                    ) -> list[np.ndarray]:
        """Pooled states for several (layer, pool) at once (the benchmark measures which to use)."""
        res: list[list[np.ndarray]] = [[] for _ in specs]
        layers = sorted({lay for lay, _ in specs})
        with self._lock:
            for k in range(0, len(rendered), batch_size):
                enc = self.tokenizer(list(rendered[k:k + batch_size]), return_tensors="pt", padding=True,
                                     truncation=True, max_length=self.max_tokens)
                states = dict(zip(layers, self._states(enc, layers), strict=True))
                m = enc["attention_mask"].to(torch.float64)
                last = m.sum(1).long() - 1
                for j, (lay, pool) in enumerate(specs):
                    h = states[lay].to(torch.float64)
                    if pool == "mean":
                        v = (h * m[..., None]).sum(1) / m.sum(1, keepdim=True)
                    else:
                        v = h[torch.arange(h.shape[0]), last]
                    res[j].append(v.numpy())
        h0 = self.hidden_size
        return [np.concatenate(r) if r else np.zeros((0, h0)) for r in res]

    def pooled(self, rendered: Sequence[str], pool: str, *, batched: bool = False) -> np.ndarray:
        return self.pooled_many(rendered, [(self.layer, pool)], batch_size=_BATCH if batched else 1)[0]


def standardiser(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mu, sd) per dimension of training features (sd floored at 1e-6 of its mean)."""
    mu = h.mean(0)
    sd = h.std(0)
    return mu, np.maximum(sd, 1e-6 * max(float(sd.mean()), 1e-12))


def pair_features(h: np.ndarray, mu: np.ndarray, sd: np.ndarray, roles: Sequence[str],
                  has_prompt: np.ndarray) -> np.ndarray:
    r = validate_roles(roles, h.shape[0])
    z = (h - mu) / (sd * np.sqrt(h.shape[1]))
    return np.concatenate([z, r[:, None], np.asarray(has_prompt, dtype=np.float64)[:, None]], axis=1)


class GemmaGuard:
    """A trained Gemma guard: the same predict API as guard.GuardModel (features, predict_from_features,
    predict_proba, logits_from_features, linear_heads) plus predict_proba_batched for the dynamic batcher."""

    kind = KIND          # per instance: config["kind"] (gemma_frozen, or gemma_lora)
    reads_pairs = True   # decision.model_scorer: scored by predict_proba[_batched] on (text, role, prompt)

    def __init__(self, heads: LinearHeads, config: dict[str, Any], backbone: GemmaBackbone, mu: np.ndarray,
                 sd: np.ndarray, *, backbone_tensors: dict[str, torch.Tensor] | None = None,
                 version: str | None = None):
        self.heads, self.config, self.backbone = heads, dict(config), backbone
        self.kind = str(self.config.get("kind", KIND))
        self.mu, self.sd = np.asarray(mu, dtype=np.float64), np.asarray(sd, dtype=np.float64)
        self.pool = str(self.config["backbone"]["pool"])
        self.backbone_tensors = backbone_tensors
        self.version = version or self.fingerprint()

    # -- identity and storage
    def fingerprint(self) -> str:
        h = hashlib.sha256(self.kind.encode())
        for k, v in sorted(self.heads.tensors().items()):
            h.update(k.encode())
            h.update(v.detach().contiguous().numpy().tobytes())
        h.update(self.mu.tobytes())
        h.update(self.sd.tobytes())
        b = self.config.get("backbone", {})
        h.update(repr((b.get("model_version_id"), b.get("sha256"), b.get("layer"), b.get("pool"))).encode())
        if b.get("lora") is not None:   # gemma_lora: the settings and the digest of the merged weights
            h.update(repr(sorted(b["lora"].items())).encode())
        return "sha256:" + h.hexdigest()[:16]

    def to_registry(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        if self.backbone_tensors is None:
            raise FailedPrecondition("this Gemma guard was built without its backbone tensors")
        t = {**self.heads.tensors(), "gemma.mu": torch.from_numpy(self.mu.copy()),
             "gemma.sd": torch.from_numpy(self.sd.copy()),
             **{"backbone." + k: v for k, v in self.backbone_tensors.items()}}
        return t, dict(self.config)

    @classmethod
    def from_registry(cls, tensors: dict[str, torch.Tensor], config: dict[str, Any], *,
                      version: str | None = None) -> GemmaGuard:
        if config.get("kind") not in KINDS:
            raise FailedPrecondition(f"not a Gemma guard: kind {config.get('kind')!r}")
        if config.get("feature_spec") != FEATURE_SPEC:
            raise FailedPrecondition(f"Gemma guard feature spec {config.get('feature_spec')!r} is not {FEATURE_SPEC}")
        b = config.get("backbone") or {}
        try:
            mu, sd = tensors["gemma.mu"].numpy(), tensors["gemma.sd"].numpy()
        except KeyError as e:
            raise FailedPrecondition(f"Gemma guard is missing tensor {e.args[0]}") from None
        bt = {k[len("backbone."):]: v for k, v in tensors.items() if k.startswith("backbone.")}
        backbone = GemmaBackbone.from_registry(bt, b["hf"], layer=int(b["layer"]),
                                               max_tokens=int(b.get("max_tokens", DEFAULT_MAX_TOKENS)),
                                               field="model")
        return cls(LinearHeads.from_tensors(tensors), config, backbone, mu, sd, backbone_tensors=bt,
                   version=version)

    # -- features and predictions
    def hidden(self, texts: Sequence[str], roles: Sequence[str], contexts: Sequence[str | None] | None = None,
               *, batched: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(pooled hidden states [N, H], has-prompt mask [N]) of the rendered rows."""
        validate_roles(roles, len(texts))
        mask = context_mask(roles, contexts)
        rendered = [render(t, r, contexts[i] if mask[i] else None) for i, (t, r) in enumerate(zip(texts, roles,
                                                                                                   strict=True))]
        return self.backbone.pooled(rendered, self.pool, batched=batched), mask

    def features(self, texts: Sequence[str], roles: Sequence[str], contexts: Sequence[str | None] | None = None,
                 *, batched: bool = False) -> np.ndarray:
        h, mask = self.hidden(texts, roles, contexts, batched=batched)
        return pair_features(h, self.mu, self.sd, roles, mask)

    def logits_from_features(self, phi: np.ndarray | torch.Tensor):
        return self.heads.logits(torch.as_tensor(phi, dtype=torch.float64))

    def predict_from_features(self, phi: np.ndarray) -> dict[str, np.ndarray]:
        return GuardModel.predict_from_features(self, phi)  # row by row, as the MiniLM guards (uses self.heads)

    def predict_proba(self, texts: Sequence[str], roles: Sequence[str],
                      contexts: Sequence[str | None] | None = None) -> dict[str, np.ndarray]:
        return self.predict_from_features(self.features(texts, roles, contexts))

    def predict_proba_batched(self, texts: Sequence[str], roles: Sequence[str],
                              contexts: Sequence[str | None] | None = None) -> dict[str, np.ndarray]:
        return self.predict_from_features(self.features(texts, roles, contexts, batched=True))

    def linear_heads(self) -> dict[str, dict[str, np.ndarray]]:
        return GuardModel.linear_heads(self)


def guard_from_registry(tensors: dict[str, torch.Tensor], config: dict[str, Any], *, version: str | None = None
                        ) -> GuardModel | GemmaGuard:
    """The guard of a registered version by its config kind, for the jobs that read a guard (calibration): a
    GemmaGuard for "gemma_frozen" and "gemma_lora", else guard.GuardModel (which names what it cannot read)."""
    if config.get("kind") in KINDS:
        return GemmaGuard.from_registry(tensors, config, version=version)
    return GuardModel.from_registry(tensors, config, version=version)


def gemma_config(backbone_config: dict[str, Any], *, model_version_id: str, layer: int, pool: str, l2: float,
                 max_tokens: int = DEFAULT_MAX_TOKENS, hidden_size: int, kind: str = KIND, **extra: Any
                 ) -> dict[str, Any]:
    return {"kind": kind, "feature_spec": FEATURE_SPEC, "feature_dim": hidden_size + 2, "topics": list(TOPICS),
            "l2": float(l2), "backbone": {"hf": backbone_config, "model_version_id": model_version_id,
                                          "layer": int(layer), "pool": pool, "max_tokens": int(max_tokens)},
            **extra}


# ------------------------------------------------------------------------------------------------ training
def _training_base():
    from services.moderation.jobs.train_guard import GuardTraining

    return GuardTraining


class GemmaGuardTraining(_training_base()):
    """moderation.train_guard with kind "gemma_frozen": the Steps of jobs/train_guard.GuardTraining with the
    backbone's features in step 0 (the registered LM version `backbone_model_version_id`, read with
    ctx.load_model) and a GemmaGuard registered at the end. Step 0 stores the standardised features and (mu, sd)
    as an artifact: a resumed job reads them back instead of running the LM again."""

    def setup(self, ctx) -> None:
        from services.common import hf
        from services.moderation.guard import Targets

        p = self.p
        self.ctx = ctx
        self.bb_tensors, self.bb_config = ctx.load_model(p.backbone_model_version_id)
        hf.check_version_config(self.bb_config, "params.backbone_model_version_id")
        self.backbone = GemmaBackbone.from_registry(self.bb_tensors, self.bb_config, layer=p.layer,
                                                    max_tokens=p.max_tokens)
        self.y_tr = Targets.from_examples(self.train)
        self.heads, self.iters, self.trainer = LinearHeads.init(self.backbone.hidden_size + 2), 0, None

    def _hidden(self, rows, lo: float, hi: float, label: str) -> tuple[np.ndarray, np.ndarray]:
        out = []
        for k in range(0, len(rows), 64):
            self.ctx.check_cancelled()
            part = rows[k:k + 64]
            out.append(self.backbone.pooled_many([render(r.text, r.role, r.prompt) for r in part],
                                                 [(self.p.layer, self.p.pool)])[0])
            self.ctx.progress(lo + (hi - lo) * min(1.0, (k + len(part)) / len(rows)), f"features ({label})")
        h = np.concatenate(out) if out else np.zeros((0, self.backbone.hidden_size))
        return h, np.array([r.prompt is not None for r in rows], dtype=bool)

    def step(self, i: int) -> dict[str, float] | None:
        if i != 0:
            return super().step(i)
        from safetensors.torch import save as st_save

        h_tr, m_tr = self._hidden(self.train, 0.0, 0.25, "train")
        h_va, m_va = self._hidden(self.val, 0.25, 0.3, "validation")
        self.mu, self.sd = standardiser(h_tr)
        self.phi_tr = pair_features(h_tr, self.mu, self.sd, [r.role for r in self.train], m_tr)
        self.phi_va = pair_features(h_va, self.mu, self.sd, [r.role for r in self.val], m_va)
        self.features_id = self.ctx.write_artifact(
            "guard-features.safetensors",
            st_save({"train": torch.from_numpy(self.phi_tr), "validation": torch.from_numpy(self.phi_va),
                     "mu": torch.from_numpy(self.mu), "sd": torch.from_numpy(self.sd)}),
            "application/vnd.praxon.safetensors", {"dataset_sha256": self.digest})
        return None

    def load_state(self, st: dict[str, Any]) -> None:
        from safetensors.torch import load as st_load

        super().load_state(st)
        feats = st_load(self.ctx.read_artifact(self.features_id))
        self.mu, self.sd = feats["mu"].numpy(), feats["sd"].numpy()

    def result(self, ctx) -> dict[str, Any]:
        p, val = self.p, self.val
        config = gemma_config(self.bb_config, model_version_id=p.backbone_model_version_id, layer=p.layer,
                              pool=p.pool, l2=p.l2, max_tokens=p.max_tokens, hidden_size=self.backbone.hidden_size,
                              newton_iterations=self.iters, dataset_sha256=self.digest, n_train=len(self.train),
                              n_validation=len(val))
        model = GemmaGuard(self.heads, config, self.backbone, self.mu, self.sd, backbone_tensors=self.bb_tensors)
        return self._register(ctx, model, self.phi_va)

    def _register(self, ctx, model: GemmaGuard, phi_va: np.ndarray | None) -> dict[str, Any]:
        """Decision defaults on the validation features `phi_va`, then the guard registered as a child of its
        backbone version (every Gemma kind ends here)."""
        from services.moderation.jobs.train_guard import validation_defaults

        p, val = self.p, self.val
        metrics = validation_defaults(model, phi_va, val, p.target_false_block_rate) if val else {}
        model.version = model.fingerprint()
        tensors, cfg = model.to_registry()
        info = ctx.register_model(p.model_name, tensors, kind=f"guard/{model.kind}", config=cfg, metrics=metrics,
                                  dataset_artifact_id=p.dataset_artifact_id,
                                  parent_version_ids=[p.backbone_model_version_id])
        ctx.progress(1.0, "registered", **metrics)
        return {"model_version_id": info.model_version_id, "name": info.name, "kind": model.kind,
                "metrics": metrics, "decision_defaults": cfg.get("decision_defaults"),
                "model_fingerprint": model.fingerprint()}
