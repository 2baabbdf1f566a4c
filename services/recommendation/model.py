"""PreferDiff, DreamRec, SASRec and GRU4Rec with full-catalogue cross-entropy (RecBole's configuration), popularity.

Follows /work/shared/algorithms/recommendation.md and the reference code (github lswhim/PreferDiff):
- history encoder: the reference's SASRec (learned positions, causal self-attention, 1 layer / 2 heads); the condition h
  is the hidden state at the last real position. Histories are right-padded with item index 0.
- denoiser f(x_t, h, t) predicts x_0: one Linear over concat[x_t, h, MLP(sinusoidal(t))].
- item embeddings: one learned table (index 0 = padding) used both for the history and as diffusion targets x_0.
- classifier-free guidance: in training h is replaced by a learned null vector with probability p_null (0.1);
  at sampling x0_hat = (1 + w) f(x, h, t) - w f(x, null, t).
- diffusion: T = 2000, linear betas 1e-4..0.02; deterministic DDIM (eta = 0) over `sample_steps` strides plus a
  final x0-prediction at t = 0 (reference: ddim_step = T / sample_steps, T / ddim_step + 1 denoiser calls).
- loss: centroid negative e_bar = mean of the other in-batch targets; x+_t and e_bar_t at the same t with
  independent noise; cos_err(a, b) = mean over the batch of (cos(a, b) - 1)^2;
  L = -(1 - lam) log sigmoid(-gamma (L_pos - L_neg)) + lam L_pos.  (As in the reference, L_pos and L_neg are
  batch means, so the preference term compares the two batch-level errors.) The formula lives in ONE place,
  kernels.preferdiff_loss (Triton on CUDA, its torch reference elsewhere); this module calls it.
- DreamRec (the baseline PreferDiff is measured against): the same network with DreamRec's own objective, the MSE
  between x0 and the prediction (lam = 1, no negatives). With loss_type "cosine" and lam = 1 it is the paper's
  cosine ablation (PreferDiff without the preference term).
- ranking: score = x0_hat . E_items^T over the whole catalogue.

SASRec-CE and GRU4Rec follow RecBole 1.2.1's models (sequential_recommender/sasrec.py, gru4rec.py) as documented:
SASRec = item + position embeddings, LayerNorm(eps 1e-12), dropout, post-LN transformer layers (attention scaled by
1/sqrt(head size), GELU feed-forward of width `inner`), N(0, 0.02) initialisation; GRU4Rec = embedding dropout, a
bias-free GRU of hidden size `inner`, a dense layer back to the embedding size. Both score with the last position's
output against the item embedding table and train with softmax cross-entropy over the whole catalogue.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from kernels.preferdiff_loss import preferdiff_loss as fused_preferdiff_loss
from kernels.preferdiff_loss.reference import cos_err as cos_err

MODEL_KINDS = ("preferdiff", "dreamrec", "sasrec_ce", "gru4rec", "popularity")


@dataclass
class ModelConfig:
    kind: str
    n_items: int
    dim: int = 64
    max_history: int = 10
    heads: int = 2
    layers: int = 1
    inner: int = 256  # SASRec (RecBole) feed-forward width / GRU4Rec hidden size
    dropout: float = 0.1
    emb_init_std: float = 1.0
    timesteps: int = 2000
    beta_start: float = 1e-4
    beta_end: float = 0.02
    sample_steps: int = 20
    guidance_w: float = 2.0
    p_null: float = 0.1
    lam: float = 0.4
    gamma: float = 5.0
    loss_type: str = "cosine"  # "cosine" (PreferDiff) or "mse" (the original DreamRec error; reference loss_type=l2)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: v for k, v in d.items() if k in names})


# ------------------------------------------------------------------------------------------- loss pieces (spec)
def centroid_negatives(x0: torch.Tensor) -> torch.Tensor:
    """Row b: mean of the other rows (the other in-batch targets). Needs B >= 2."""
    b = x0.shape[0]
    if b < 2:
        raise ValueError("centroid negatives need a batch of at least 2")
    return (x0.sum(0, keepdim=True) - x0) / (b - 1)


def guided_x0(cond: torch.Tensor, uncond: torch.Tensor, w: float) -> torch.Tensor:
    return (1.0 + w) * cond - w * uncond


def linear_alphas_cumprod(timesteps: int, beta_start: float, beta_end: float) -> torch.Tensor:
    betas = torch.linspace(beta_start, beta_end, timesteps, dtype=torch.float64)
    return torch.cumprod(1.0 - betas, 0).to(torch.float32)


def ddim_timesteps(timesteps: int, steps: int) -> list[int]:
    """Descending sub-sequence of [0, T): T-1, T-1-T/S, ..., T/S-1, then 0 (S + 1 values, S strides).

    As in the reference (diffusion.py, init_ddim_variables / sample_from_noise with ddim_step = T/S): the grid is
    range(0, T + 1, T/S) shifted down by one, with its first entry clamped to 0, walked from the top; so after the
    S strides the sampler makes one last x0-prediction at t = 0 from the (nearly clean) x_{T/S-1}."""
    steps = max(1, min(int(steps), timesteps))
    stride = timesteps / steps
    ts = [int(round(stride * (i + 1))) - 1 for i in reversed(range(steps))]
    return ts + [0] if ts[-1] != 0 else ts


@torch.no_grad()
def ddim_sample(x0_fn, shape: tuple[int, ...], alphas_cumprod: torch.Tensor, steps: int,
                generator: torch.Generator | None = None, x_T: torch.Tensor | None = None) -> torch.Tensor:
    """Deterministic DDIM (eta = 0) with an x0-predictor: x_prev = sqrt(a_prev) x0 + sqrt(1 - a_prev) eps_hat,
    eps_hat = (x_t - sqrt(a_t) x0) / sqrt(1 - a_t); the last step has a_prev = 1 and returns x0_hat itself.
    `x0_fn(x_t, t: LongTensor [B]) -> x0_hat`."""
    ts = ddim_timesteps(alphas_cumprod.numel(), steps)
    x = x_T if x_T is not None else torch.randn(shape, generator=generator, dtype=alphas_cumprod.dtype)
    x = x.to(alphas_cumprod.device)
    for i, t in enumerate(ts):
        a_t = alphas_cumprod[t]
        a_prev = alphas_cumprod[ts[i + 1]] if i + 1 < len(ts) else torch.ones((), dtype=a_t.dtype,
                                                                              device=a_t.device)
        x0 = x0_fn(x, torch.full((shape[0],), t, dtype=torch.long, device=x.device))
        eps = (x - a_t.sqrt() * x0) / (1.0 - a_t).sqrt()
        x = a_prev.sqrt() * x0 + (1.0 - a_prev).sqrt() * eps
    return x


def sinusoidal(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(torch.arange(half, dtype=torch.float32, device=t.device) *
                      -(math.log(10000.0) / max(half - 1, 1)))
    ang = t.to(torch.float32)[:, None] * freqs[None, :]
    emb = torch.cat([ang.sin(), ang.cos()], dim=-1)
    return F.pad(emb, (0, dim - 2 * half))


# ------------------------------------------------------------------------------------------------- networks
class _Block(nn.Module):
    """The reference's transformer layer (modules.py: TransformerEncoder / MultiHeadAttention /
    PositionwiseFeedForward), kept as written there:
    - queries come from LayerNorm(x) but keys and values from the raw (masked) x; scores are scaled by
      1/sqrt(dim) (the full hidden size, not the head size); padded keys and future positions are masked,
      padded queries zeroed; dropout on the attention weights; the attention output gets the normalised queries
      added back (its own residual) before the outer residual;
    - feed-forward (two width-`dim` position-wise layers, ReLU) on LayerNorm(x), with dropout and its own
      LayerNorm(out + in); zeroed at padded positions; outer residual; the layer returns LayerNorm(x).
    The attention projections get Xavier-uniform weights and zero biases, as in the reference's init."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.ln3 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        for lin in (self.q, self.k, self.v):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.attn_drop = nn.Dropout(dropout)
        self.ff = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim), nn.Dropout(dropout))
        self.ff_ln = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        hd = d // self.heads
        x = x * mask
        qn = self.ln1(x)
        q = self.q(qn).view(b, n, self.heads, hd).transpose(1, 2)
        k = self.k(x).view(b, n, self.heads, hd).transpose(1, 2)
        v = self.v(x).view(b, n, self.heads, hd).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        real = mask[..., 0] > 0  # [b, n]
        allowed = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()[None, None] & real[:, None, None, :]
        att = torch.softmax(scores.masked_fill(~allowed, -1e9), dim=-1) * mask[:, None]  # zero padded queries
        att = self.attn_drop(att)
        x = x + (att @ v).transpose(1, 2).reshape(b, n, d) + qn
        y = self.ln2(x)
        x = x + self.ff_ln(self.ff(y) + y) * mask
        return self.ln3(x)


class SequenceEncoder(nn.Module):
    """SASRec as in the reference (models/SASRec/_model.py): item + learned position embeddings (both N(0, 1)
    initialised, no scaling), embedding dropout, the reference's layers; returns the state at the last item."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.item_emb = nn.Embedding(cfg.n_items + 1, cfg.dim, padding_idx=0)
        nn.init.normal_(self.item_emb.weight, 0.0, cfg.emb_init_std)
        with torch.no_grad():
            self.item_emb.weight[0].zero_()
        self.pos_emb = nn.Embedding(cfg.max_history, cfg.dim)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(_Block(cfg.dim, cfg.heads, cfg.dropout) for _ in range(cfg.layers))

    def forward(self, history: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        n = history.shape[1]
        mask = (history != 0).unsqueeze(-1).to(self.item_emb.weight.dtype)
        x = self.item_emb(history) + self.pos_emb.weight[:n].unsqueeze(0)
        x = self.drop(x) * mask
        for blk in self.blocks:
            x = blk(x, mask)
        idx = (lengths.clamp(min=1) - 1).view(-1, 1, 1).expand(-1, 1, x.shape[-1])
        return x.gather(1, idx).squeeze(1)


class PreferDiff(nn.Module):
    """Diffusion recommender; lam = 1 gives DreamRec (no preference term)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        self.encoder = SequenceEncoder(cfg)
        self.null = nn.Parameter(torch.randn(d))
        self.step_mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.denoiser = nn.Linear(3 * d, d)
        self.register_buffer("alphas_cumprod", linear_alphas_cumprod(cfg.timesteps, cfg.beta_start, cfg.beta_end),
                             persistent=False)

    def item_table(self) -> torch.Tensor:
        """[N, d]: row j scores item index j + 1."""
        return self.encoder.item_emb.weight[1:]

    def denoise(self, x_t: torch.Tensor, h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        temb = self.step_mlp(sinusoidal(t, self.cfg.dim))
        return self.denoiser(torch.cat([x_t, h, temb], dim=-1))

    def q_sample(self, x0: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        a = self.alphas_cumprod[t].unsqueeze(-1)
        return a.sqrt() * x0 + (1.0 - a).sqrt() * noise

    def loss(self, history: torch.Tensor, lengths: torch.Tensor, target: torch.Tensor, *,
             t: torch.Tensor | None = None, noise_pos: torch.Tensor | None = None,
             noise_neg: torch.Tensor | None = None, null_mask: torch.Tensor | None = None,
             x0_neg: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """The training objective; the optional arguments pin the random draws (tests)."""
        cfg = self.cfg
        b = target.shape[0]
        h = self.encoder(history, lengths)
        if null_mask is None:
            null_mask = torch.rand(b, device=h.device) < cfg.p_null
        h = torch.where(null_mask.unsqueeze(-1), self.null.expand_as(h), h)
        x0_pos = self.encoder.item_emb(target)
        if x0_neg is None and cfg.loss_type != "mse":
            x0_neg = centroid_negatives(x0_pos)
        dev = x0_pos.device
        if t is None:
            t = torch.randint(0, cfg.timesteps, (b,), device=dev)
        if noise_pos is None:
            noise_pos = torch.randn_like(x0_pos)
        if noise_neg is None and cfg.loss_type != "mse":
            noise_neg = torch.randn_like(x0_pos)
        x_pos = self.q_sample(x0_pos, t, noise_pos)
        if cfg.loss_type == "mse":  # DreamRec's objective: lam = 1, no negatives
            pred = self.denoise(x_pos, h, t)
            loss = F.mse_loss(pred, x0_pos)
            return loss, {"loss": float(loss.detach()), "l_pos": float(loss.detach())}
        x_neg = self.q_sample(x0_neg, t, noise_neg)
        pred = self.denoise(torch.cat([x_pos, x_neg]), torch.cat([h, h]), torch.cat([t, t]))
        loss, l_pos, l_neg = fused_preferdiff_loss(pred[:b].contiguous(), x0_pos.contiguous(),
                                                   pred[b:].contiguous(), x0_neg.contiguous(), cfg.lam, cfg.gamma,
                                                   return_terms=True)
        return loss, {"loss": float(loss.detach()), "l_pos": float(l_pos.detach()), "l_neg": float(l_neg.detach())}

    @torch.no_grad()
    def sample(self, h: torch.Tensor, *, w: float | None = None, steps: int | None = None,
               generator: torch.Generator | None = None, x_T: torch.Tensor | None = None) -> torch.Tensor:
        w = self.cfg.guidance_w if w is None else float(w)
        null = self.null.expand_as(h)

        def x0_fn(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            if w == 0.0:
                return self.denoise(x, h, t)
            both = self.denoise(torch.cat([x, x]), torch.cat([h, null]), torch.cat([t, t]))
            return guided_x0(both[:h.shape[0]], both[h.shape[0]:], w)

        return ddim_sample(x0_fn, tuple(h.shape), self.alphas_cumprod, steps or self.cfg.sample_steps, generator,
                           x_T=x_T)

    @torch.no_grad()
    def queries(self, history: torch.Tensor, lengths: torch.Tensor, *,
                generator: torch.Generator | None = None) -> torch.Tensor:
        """[B, d] vectors whose dot product with item_table() ranks the catalogue."""
        return self.sample(self.encoder(history, lengths), generator=generator)


class RecBoleSASRecEncoder(nn.Module):
    """SASRec as RecBole builds it (see the module docstring); returns the output at the last real position."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.dim
        self.heads = cfg.heads
        self.item_emb = nn.Embedding(cfg.n_items + 1, d, padding_idx=0)
        self.pos_emb = nn.Embedding(cfg.max_history, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList()
        for _ in range(cfg.layers):
            self.layers.append(nn.ModuleDict({
                "q": nn.Linear(d, d), "k": nn.Linear(d, d), "v": nn.Linear(d, d), "o": nn.Linear(d, d),
                "ln1": nn.LayerNorm(d, eps=1e-12), "ff1": nn.Linear(d, cfg.inner), "ff2": nn.Linear(cfg.inner, d),
                "ln2": nn.LayerNorm(d, eps=1e-12)}))
        self.attn_drop = nn.Dropout(cfg.dropout)
        std = cfg.emb_init_std or 0.02
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, std if isinstance(m, nn.Embedding) else 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, history: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        b, n = history.shape
        d = self.item_emb.embedding_dim
        hd = d // self.heads
        x = self.drop(self.ln(self.item_emb(history) + self.pos_emb.weight[:n].unsqueeze(0)))
        allowed = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()[None, None] & \
            (history > 0)[:, None, None, :]
        bias = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill(~allowed, -10000.0)
        for blk in self.layers:
            q = blk["q"](x).view(b, n, self.heads, hd).transpose(1, 2)
            k = blk["k"](x).view(b, n, self.heads, hd).transpose(1, 2)
            v = blk["v"](x).view(b, n, self.heads, hd).transpose(1, 2)
            att = self.attn_drop(torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + bias, dim=-1))
            ctx = (att @ v).transpose(1, 2).reshape(b, n, d)
            x = blk["ln1"](self.drop(blk["o"](ctx)) + x)
            x = blk["ln2"](self.drop(blk["ff2"](F.gelu(blk["ff1"](x)))) + x)
        idx = (lengths.clamp(min=1) - 1).view(-1, 1, 1).expand(-1, 1, d)
        return x.gather(1, idx).squeeze(1)


class GRU4RecEncoder(nn.Module):
    """GRU4Rec as RecBole builds it: embedding dropout, bias-free GRU (hidden `inner`), dense back to `dim`."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.item_emb = nn.Embedding(cfg.n_items + 1, cfg.dim, padding_idx=0)
        self.drop = nn.Dropout(cfg.dropout)
        self.gru = nn.GRU(cfg.dim, cfg.inner, num_layers=cfg.layers, bias=False, batch_first=True)
        self.dense = nn.Linear(cfg.inner, cfg.dim)
        nn.init.xavier_normal_(self.item_emb.weight)
        for name, p in self.gru.named_parameters():
            if name.startswith("weight"):
                nn.init.xavier_uniform_(p)

    def forward(self, history: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.drop(self.item_emb(history)))
        out = self.dense(out)
        idx = (lengths.clamp(min=1) - 1).view(-1, 1, 1).expand(-1, 1, out.shape[-1])
        return out.gather(1, idx).squeeze(1)


class CrossEntropyRecommender(nn.Module):
    """A sequence encoder trained with softmax cross-entropy over the full catalogue; scores = h . E^T."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = GRU4RecEncoder(cfg) if cfg.kind == "gru4rec" else RecBoleSASRecEncoder(cfg)

    def item_table(self) -> torch.Tensor:
        return self.encoder.item_emb.weight[1:]

    def loss(self, history: torch.Tensor, lengths: torch.Tensor, target: torch.Tensor
             ) -> tuple[torch.Tensor, dict[str, float]]:
        logits = self.encoder(history, lengths) @ self.item_table().T
        loss = F.cross_entropy(logits, target - 1)
        return loss, {"loss": float(loss.detach())}

    @torch.no_grad()
    def queries(self, history: torch.Tensor, lengths: torch.Tensor, *,
                generator: torch.Generator | None = None) -> torch.Tensor:
        return self.encoder(history, lengths)


SASRecCE = CrossEntropyRecommender


def build_model(cfg: ModelConfig) -> nn.Module:
    if cfg.kind in ("preferdiff", "dreamrec"):
        return PreferDiff(cfg)
    if cfg.kind in ("sasrec_ce", "gru4rec"):
        return CrossEntropyRecommender(cfg)
    raise ValueError(f"no network for kind {cfg.kind!r}")
