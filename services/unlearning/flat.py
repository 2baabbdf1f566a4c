"""Unlearning a causal language model from forget data: FLAT (Wang et al., "LLM Unlearning via Loss Adjustment with
only Forget Data", ICLR 2025; github UCSC-REAL/FLAT) and two baselines, gradient ascent and NPO (as OpenUnlearning,
github locuslab/open-unlearning, implements it). Also the "fine-tune on QA" loss the TOFU-style evaluation starts from.

Losses (no grpc, no registry; the job around them is llm_jobs.py):

  FLAT (`flat_loss`), as the paper's code computes it (dataloader.py: ProbLossStable + get_contrastive_loss):
    P = mean token probability of the answer given the question: softmax probability of each label token, summed over
        the answer tokens (question and padding positions count 0) and divided by the number of label positions of
        the padded batch, B * (max_length - 1). The code pads every sequence to max_length (500 in unlearn.py); padded
        positions only add zeros, so we compute the same number without materialising the padding (causal models:
        padding after the answer cannot change the answer's probabilities). `max_length=0` divides by the number of
        answer tokens instead (the paper's wording, "average token probability"; not the code's default).
    L = activation(P_e) - conjugate(P_f), P_e on (question, template answer), P_f on (question, forget answer), with
    activation / conjugate per f-divergence exactly as the code writes them (each already negated and averaged):
        Total-Variation (default)  -tanh(x)/2                         / -tanh(x)/2
        KL                         -x                                 / -exp(x - 1)
        Reverse-KL                 exp(x)                             / 1 + x
        Jeffrey                    -x                                 / -(x + x^2/4 + x^3/16)
        Squared-Hellinger          -(1 - exp(x))                      / -(1 - exp(x)) / exp(x)
        Pearson                    -x                                 / -(x^2/4 + x)
        Neyman                     -(1 - exp(x))                      / -(2 - 2 sqrt(1 - x))
        Jensen-Shannon             log(1 + exp(-x)) - log 2           / -(x + log(1 + exp(-x))) + log 2
    With P in [0, 1], descent lowers P_f and raises P_e for Total-Variation, KL, Jeffrey, Pearson and Jensen-Shannon;
    the code's Reverse-KL ("remove log") and Squared-Hellinger pairs have both derivatives of the other sign (descent
    raises the forget answer's probability), and its Neyman pair lowers P_e too. We keep the pairs exactly as
    published (tests/unlearning/test_flat.py pins these signs); use the first five.
    No retain data, no reference model. The template answer of each forget question is drawn from a list of
    "I don't know"-style answers, afresh at every visit (the code samples one in the dataset's __getitem__).
  Gradient ascent (`grad_ascent_loss`): minus the model's mean cross-entropy over the answer tokens of the batch.
  NPO (`npo_loss`, OpenUnlearning's NPO = compute_dpo_loss with only a "lose" side, plus GradDiff's retain term):
    -2/beta * mean(logsigmoid(beta * (nll_theta - nll_ref))) + alpha * retain NLL, nll = summed answer-token
    cross-entropy per sequence; beta 0.1, alpha 1, gamma 1 (their NPO.yaml). The reference model's losses are
    computed once, before the first step, with the starting weights in eval mode (the reference is frozen, so this
    equals OpenUnlearning's per-batch no_grad forward); alpha = 0 is the forget-only NPO of the FLAT repository.
  Fine-tuning on QA (`qa_nll_loss`): the mean answer-token cross-entropy (TOFU's finetune.py).

Training (`Trainer`): AdamW (weight decay 0.01), linear warm-up over max(2, steps per epoch) optimiser steps then linear
decay to 0 (the Trainer set-up of FLAT's unlearn.py), `batch_size` x `grad_accum` examples per optimiser step, epochs
over the forget set; LoRA through peft on every linear layer but the output head (their find_all_linear_names; r 8,
alpha 32, dropout 0.05 as forget_lora.yaml) or full fine-tuning. The whole state (trainable weights, optimiser, the
RNG, the step) is a checkpoint: a resumed run continues bit for bit.

Prompt format: "Question: {question}\\nAnswer:" then " {answer}" and the end-of-sequence token (the question/answer
tags of the repository's phi and stablelm configs). The question and answer are tokenised separately and joined, so
the answer's tokens are the same whatever the question (the code tokenises the joined text; the boundary may differ
by a token). Labels are -100 on the question's tokens, as the code sets them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

# our name -> the name in the paper's code (get_contrastive_loss)
DIVERGENCES = {"total_variation": "Total-Variation", "kl": "KL", "reverse_kl": "Reverse-KL", "jeffrey": "Jeffrey",
               "squared_hellinger": "Squared-Hellinger", "pearson": "Pearson", "neyman": "Neyman",
               "jensen_shannon": "Jenson-Shannon"}
LM_METHODS = ("flat", "gradient_ascent", "npo")
PAPER_MAX_LENGTH = 500  # unlearn.py pads every sequence to this length
IGNORE = -100
# "I don't know"-style template answers (our own wording; the repository ships a list of this kind)
TEMPLATE_ANSWERS = (
    "I don't know.", "I'm not sure about that.", "I have no information about that.",
    "I can't answer that question.", "That is not something I know.", "I'm afraid I don't have that information.",
    "I have no idea.", "I don't have an answer to that.", "I'm unable to answer that.", "That's beyond what I know.",
    "I couldn't tell you.", "Sorry, I don't know the answer.", "I'm not familiar with that.",
    "I don't have any details on that.", "I really can't say.", "That's unknown to me.")


def prompt_text(question: str) -> str:
    return f"Question: {question}\nAnswer:"


# ---- the losses ------------------------------------------------------------------------------------------
def activation(div: str, x: torch.Tensor) -> torch.Tensor:
    """The code's activation(x) for divergence `div` (one of DIVERGENCES), already negated and averaged."""
    if div == "kl" or div == "jeffrey" or div == "pearson":
        return -torch.mean(x)
    if div == "reverse_kl":
        return -torch.mean(-torch.exp(x))
    if div == "squared_hellinger" or div == "neyman":
        return -torch.mean(1.0 - torch.exp(x))
    if div == "jensen_shannon":
        return -torch.mean(-torch.log(1.0 + torch.exp(-x))) - math.log(2.0)
    if div == "total_variation":
        return -torch.mean(torch.tanh(x) / 2.0)
    raise ValueError(f"unknown divergence {div!r}")


def conjugate(div: str, x: torch.Tensor) -> torch.Tensor:
    """The code's conjugate(x) (f*(g(x))) for divergence `div`, already negated and averaged."""
    if div == "kl":
        return -torch.mean(torch.exp(x - 1.0))
    if div == "reverse_kl":
        return -torch.mean(-1.0 - x)
    if div == "jeffrey":
        return -torch.mean(x + x * x / 4.0 + x * x * x / 16.0)
    if div == "squared_hellinger":
        return -torch.mean((1.0 - torch.exp(x)) / torch.exp(x))
    if div == "pearson":
        return -torch.mean(x * x / 4.0 + x)
    if div == "neyman":
        return -torch.mean(2.0 - 2.0 * torch.sqrt(1.0 - x))
    if div == "jensen_shannon":
        return -torch.mean(x + torch.log(1.0 + torch.exp(-x))) + math.log(2.0)
    if div == "total_variation":
        return -torch.mean(torch.tanh(x) / 2.0)
    raise ValueError(f"unknown divergence {div!r}")


def flat_loss(p_forget: torch.Tensor, p_template: torch.Tensor, div: str = "total_variation") -> torch.Tensor:
    """L = activation(P_e) - conjugate(P_f) (get_contrastive_loss(prob_sum_unlearn=-P_f, prob_sum_good=-P_e))."""
    return activation(div, p_template) - conjugate(div, p_forget)


def _wide(x: torch.Tensor) -> torch.Tensor:
    """float32 at least (half-precision logits are widened; float64 stays float64)."""
    return x if x.dtype == torch.float64 else x.float()


def token_probs(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(p [B, T-1], valid [B, T-1]): the softmax probability of each next-token label (0 where the label is -100)."""
    lg = _wide(logits[:, :-1, :])
    lab = labels[:, 1:]
    valid = lab != IGNORE
    picked = lg.gather(-1, lab.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    p = torch.exp(picked - torch.logsumexp(lg, dim=-1)) * valid
    return p, valid


def mean_token_prob(logits: torch.Tensor, labels: torch.Tensor, max_length: int = PAPER_MAX_LENGTH) -> torch.Tensor:
    """P of a batch as the code computes it (see the module docstring): sum of answer-token probabilities over
    B * (max_length - 1); max_length = 0: over the number of answer tokens."""
    p, valid = token_probs(logits, labels)
    if max_length:
        return p.sum() / (labels.shape[0] * (max_length - 1))
    return p.sum() / valid.sum().clamp(min=1)


def sequence_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed answer-token cross-entropy per sequence [B] (OpenUnlearning's compute_batch_nll)."""
    lg = _wide(logits[:, :-1, :])
    lab = labels[:, 1:]
    ce = F.cross_entropy(lg.transpose(1, 2), lab, ignore_index=IGNORE, reduction="none")
    return ce.sum(-1)


def mean_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The model's own loss: mean cross-entropy over every answer token of the batch (model(labels=...).loss)."""
    lg = _wide(logits[:, :-1, :])
    return F.cross_entropy(lg.reshape(-1, lg.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=IGNORE)


def grad_ascent_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return -mean_nll(logits, labels)


def npo_loss(nll_theta: torch.Tensor, nll_ref: torch.Tensor, beta: float = 0.1) -> torch.Tensor:
    """OpenUnlearning compute_dpo_loss(win_inputs=None, lose_inputs=forget): lose_log_ratio = -(nll - nll_ref),
    loss = -2/beta * mean(logsigmoid(beta * (0 - lose_log_ratio)))."""
    lose_log_ratio = -(nll_theta - nll_ref)
    return -2.0 / beta * F.logsigmoid(beta * (0.0 - lose_log_ratio)).mean()


def qa_nll_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return mean_nll(logits, labels)


# ---- tokenisation ----------------------------------------------------------------------------------------
def encode(tokenizer, question: str, answer: str) -> tuple[list[int], list[int]]:
    """(input ids, labels) of one (question, answer): [bos] question-prompt, " answer", eos; labels -100 on the
    prompt."""
    q = tokenizer(prompt_text(question), add_special_tokens=True)["input_ids"]
    a = tokenizer(" " + answer.strip(), add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    ids = list(q) + list(a) + ([eos] if eos is not None else [])
    return ids, [IGNORE] * len(q) + ids[len(q):]


def collate(pairs: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Left-padded batch (labels -100 and attention 0 on the padding; position ids count real tokens only), and
    `keep`: how many final positions hold every answer (the logits of the others are never needed: labels there
    are -100, so they are not computed; see `forward`)."""
    n = max(len(i) for i, _ in pairs)
    ids = torch.full((len(pairs), n), pad_id, dtype=torch.long)
    lab = torch.full((len(pairs), n), IGNORE, dtype=torch.long)
    att = torch.zeros((len(pairs), n), dtype=torch.long)
    keep = 2
    for k, (i, lb) in enumerate(pairs):
        ids[k, n - len(i):] = torch.tensor(i)
        lab[k, n - len(lb):] = torch.tensor(lb)
        att[k, n - len(i):] = 1
        first = next((j for j, v in enumerate(lb) if v != IGNORE), len(lb))
        keep = max(keep, len(lb) - first + 1)
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": ids, "labels": lab, "attention_mask": att, "position_ids": pos, "keep": min(keep, n)}


def pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)


def forward(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, labels) over the batch's last `keep` positions (transformers' logits_to_keep): every position whose
    next-token label is an answer token, plus the one before the first answer token."""
    k = int(batch["keep"])
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"], logits_to_keep=k)
    return out.logits, batch["labels"][:, -k:]


# ---- the trainer -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QA:
    question: str
    answer: str
    record_id: str = ""


@dataclass
class TrainConfig:
    method: str = "flat"                  # flat | gradient_ascent | npo | finetune
    divergence: str = "total_variation"
    adaptation: str = "lora"              # lora | full
    lora_rank: int = 8
    lora_alpha: float = 32.0
    lora_dropout: float = 0.05
    lr: float = 1e-4
    weight_decay: float = 0.01
    epochs: int = 5
    batch_size: int = 16
    grad_accum: int = 1
    max_length: int = PAPER_MAX_LENGTH   # FLAT's P normaliser (0: answer tokens)
    npo_beta: float = 0.1
    npo_retain_weight: float = 1.0
    seed: int = 0
    templates: tuple[str, ...] = TEMPLATE_ANSWERS


def add_lora(model, cfg: TrainConfig):
    """peft LoRA on every linear layer but the output head ("all-linear"), r / alpha / dropout from cfg."""
    from peft import LoraConfig, get_peft_model

    lc = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                    target_modules="all-linear", bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, lc)


def merged(model):
    """The plain transformers model (LoRA adapters merged into the weights)."""
    if hasattr(model, "merge_and_unload"):
        return model.merge_and_unload()
    return model


@dataclass
class Trainer:
    """One unlearning (or fine-tuning) run as steps: `step()` is one optimiser step. `forget` is the data the loss
    is on (the fine-tuning set for method finetune); `retain` only for NPO's retain term (alpha > 0)."""

    model: Any
    tokenizer: Any
    forget: list[QA]
    cfg: TrainConfig
    retain: list[QA] = field(default_factory=list)

    def __post_init__(self):
        cfg = self.cfg
        if cfg.method not in LM_METHODS + ("finetune",):
            raise ValueError(f"unknown method {cfg.method!r}")
        if cfg.method == "flat" and cfg.divergence not in DIVERGENCES:
            raise ValueError(f"unknown divergence {cfg.divergence!r}")
        if not self.forget:
            raise ValueError("no forget data")
        torch.manual_seed(cfg.seed)
        self.pad = pad_id(self.tokenizer)
        self.enc = [encode(self.tokenizer, x.question, x.answer) for x in self.forget]
        longest = max(len(i) for i, _ in self.enc)
        if cfg.max_length and longest > cfg.max_length:
            raise ValueError(f"a forget example has {longest} tokens, more than max_length {cfg.max_length}")
        self.ref_nll: torch.Tensor | None = None
        if cfg.method == "npo":  # the frozen reference: the starting weights, eval mode, once
            self.ref_nll = self.nll_of(self.enc)
        if cfg.adaptation == "lora":
            self.model = add_lora(self.model, cfg)
        elif cfg.adaptation != "full":
            raise ValueError(f"unknown adaptation {cfg.adaptation!r}")
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        per_step = cfg.batch_size * cfg.grad_accum
        self.steps_per_epoch = max(1, math.ceil(len(self.forget) / per_step))
        self.total = self.steps_per_epoch * cfg.epochs
        self.warmup = min(max(2, self.steps_per_epoch), max(self.total - 1, 1))
        self.step_no = 0
        self.last: dict[str, float] = {}

    # -- helpers
    @torch.no_grad()
    def nll_of(self, enc: list, batch: int = 16) -> torch.Tensor:
        was = self.model.training
        self.model.eval()
        out = []
        for i in range(0, len(enc), batch):
            b = collate(enc[i:i + batch], self.pad)
            out.append(sequence_nll(*forward(self.model, b)))
        self.model.train(was)
        return torch.cat(out)

    def lr_at(self, step: int) -> float:
        if step < self.warmup:
            return self.cfg.lr * step / self.warmup  # transformers' get_linear_schedule_with_warmup (0 at step 0)
        return self.cfg.lr * max(0.0, (self.total - step) / max(1, self.total - self.warmup))

    def _order(self, epoch: int) -> list[int]:
        g = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + epoch)
        return torch.randperm(len(self.forget), generator=g).tolist()

    def _template(self, epoch: int, idx: int) -> str:
        g = torch.Generator().manual_seed((self.cfg.seed * 7919 + epoch) * 100_003 + idx)
        return self.cfg.templates[int(torch.randint(len(self.cfg.templates), (1,), generator=g))]

    def _retain_batch(self, epoch: int, micro: int, n: int) -> list:
        g = torch.Generator().manual_seed((self.cfg.seed * 31 + epoch) * 1_000_033 + micro)
        idx = torch.randint(len(self.retain), (n,), generator=g).tolist()
        return [encode(self.tokenizer, self.retain[i].question, self.retain[i].answer) for i in idx]

    def loss_of(self, idx: list[int], epoch: int, micro: int) -> tuple[torch.Tensor, dict[str, float]]:
        cfg, enc = self.cfg, [self.enc[i] for i in idx]
        b = collate(enc, self.pad)
        if cfg.method == "flat":
            tmpl = [encode(self.tokenizer, self.forget[i].question, self._template(epoch, i)) for i in idx]
            bt = collate(tmpl, self.pad)
            p_f = mean_token_prob(*forward(self.model, b), cfg.max_length)
            p_e = mean_token_prob(*forward(self.model, bt), cfg.max_length)
            loss = flat_loss(p_f, p_e, cfg.divergence)
            return loss, {"p_forget": p_f.item(), "p_template": p_e.item()}
        logits, labels = forward(self.model, b)
        if cfg.method == "gradient_ascent":
            loss = grad_ascent_loss(logits, labels)
            return loss, {"forget_nll": -loss.item()}
        if cfg.method == "finetune":
            loss = qa_nll_loss(logits, labels)
            return loss, {"nll": loss.item()}
        nll = sequence_nll(logits, labels)
        loss = npo_loss(nll, self.ref_nll[idx], cfg.npo_beta)
        out = {"npo_forget": loss.item()}
        if cfg.npo_retain_weight > 0 and self.retain:
            br = collate(self._retain_batch(epoch, micro, len(idx)), self.pad)
            r = mean_nll(*forward(self.model, br))
            loss = loss + cfg.npo_retain_weight * r
            out["retain_nll"] = r.item()
        return loss, out

    def step(self) -> dict[str, float]:
        """One optimiser step (grad_accum micro-batches of batch_size); the data order is a function of (seed,
        epoch), so a resumed run sees the same batches."""
        cfg = self.cfg
        epoch, within = divmod(self.step_no, self.steps_per_epoch)
        order = self._order(epoch)
        per_step = cfg.batch_size * cfg.grad_accum
        chunk = order[within * per_step:(within + 1) * per_step]
        self.model.train()
        for g in self.opt.param_groups:
            g["lr"] = self.lr_at(self.step_no)
        self.opt.zero_grad(set_to_none=True)
        total, stats = 0.0, {}
        micros = [chunk[i:i + cfg.batch_size] for i in range(0, len(chunk), cfg.batch_size)]
        for m, idx in enumerate(micros):
            loss, stats = self.loss_of(idx, epoch, within * cfg.grad_accum + m)
            (loss / len(micros)).backward()
            total += loss.item() / len(micros)
        self.opt.step()
        self.step_no += 1
        self.last = {"loss": total, "lr": self.opt.param_groups[0]["lr"], **stats}
        return self.last

    def run(self) -> list[dict[str, float]]:
        return [self.step() for _ in range(self.total - self.step_no)]

    # -- checkpoints
    def state(self) -> dict[str, Any]:
        trainable = {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}
        opt = self.opt.state_dict()
        return {"step_no": self.step_no, "trainable": trainable,
                "opt_state": {str(k): v for k, v in opt["state"].items()},
                "rng": torch.get_rng_state(), "ref_nll": self.ref_nll}

    def load_state(self, st: dict[str, Any]) -> None:
        named = dict(self.model.named_parameters())
        with torch.no_grad():
            for n, v in st["trainable"].items():
                named[n].copy_(v)
        sd = self.opt.state_dict()
        sd["state"] = {int(k): v for k, v in st["opt_state"].items()}
        self.opt.load_state_dict(sd)
        torch.set_rng_state(st["rng"])
        self.step_no = int(st["step_no"])
        if st.get("ref_nll") is not None:
            self.ref_nll = st["ref_nll"]

    def final_model(self):
        self.model.eval()
        return merged(self.model)
