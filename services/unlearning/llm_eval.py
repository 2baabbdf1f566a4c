"""TOFU-style evaluation of an unlearned language model (the formulas of TOFU's evaluation as FLAT's utils.py
aggregates them), at small scale.

  avg loss of (q, a)      mean answer-token negative log-likelihood (TOFU's avg_gt_loss / avg_paraphrased_loss)
  truth ratio R           exp(mean_k avg_loss(perturbed_k) - avg_loss(paraphrased))   (get_forget_quality)
  forget quality          KS-test p-value between the R of the forget questions under the unlearned model and
                          under a model fine-tuned without the forgotten authors (ks_2samp(...).pvalue)
  utility of a set        probability (retain: mean exp(-avg loss) of the answer; world facts: mean of
                          p(answer) / (p(answer) + sum p(wrong)) with p = exp(-avg loss)), truth ratio (mean of
                          max(0, 1 - mean_k p(perturbed_k) / p(paraphrased))), ROUGE-L recall of the greedy answer
  model utility           harmonic mean of those numbers over the retained authors and the world facts (TOFU also
                          uses a real-authors set; we have none: the two sets here)
  MIA AUC                 loss-threshold membership inference: AUC of -avg loss of the forgotten records (members)
                          against records of authors never trained on (non-members); 0.5 = indistinguishable.
ROUGE-L recall is our own LCS over lower-cased words (the rouge_score package is not installed): recall =
LCS(generated, answer) / len(answer)."""
from __future__ import annotations

import re
from typing import Any

import torch

from services.unlearning import audit
from services.unlearning.flat import IGNORE, collate, encode, forward, pad_id, prompt_text, sequence_nll


@torch.no_grad()
def avg_losses(model, tokenizer, pairs: list[tuple[str, str]], batch: int = 16) -> torch.Tensor:
    """Mean answer-token NLL of each (question, answer) [n] (float64)."""
    model.eval()
    pid, out = pad_id(tokenizer), []
    enc = [encode(tokenizer, q, a) for q, a in pairs]
    for i in range(0, len(enc), batch):
        b = collate(enc[i:i + batch], pid)
        logits, labels = forward(model, b)
        nll = sequence_nll(logits, labels)
        n = (labels[:, 1:] != IGNORE).sum(-1).clamp(min=1)
        out.append((nll / n).double())
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)


def _loss_table(model, tokenizer, recs: list[dict], batch: int = 16) -> dict[str, torch.Tensor]:
    """avg losses of each record's answer, paraphrased answer and perturbed answers ([n], [n], [n, k])."""
    k = len(recs[0]["perturbed_answers"]) if recs else 0
    pairs = [(r["question"], r["answer"]) for r in recs] + [(r["question"], r["paraphrased_answer"]) for r in recs]
    pairs += [(r["question"], p) for r in recs for p in r["perturbed_answers"]]
    ls = avg_losses(model, tokenizer, pairs, batch)
    n = len(recs)
    return {"gt": ls[:n], "para": ls[n:2 * n], "pert": ls[2 * n:].reshape(n, k)}


def truth_ratio_stat(t: dict[str, torch.Tensor]) -> torch.Tensor:
    """R = exp(mean_k perturbed loss - paraphrased loss) per question (FLAT utils.get_forget_quality)."""
    return torch.exp(t["pert"].mean(-1) - t["para"])


def forget_quality(r_unlearned: torch.Tensor, r_retain_model: torch.Tensor) -> dict[str, float]:
    from scipy.stats import ks_2samp

    res = ks_2samp(r_unlearned.numpy(), r_retain_model.numpy())
    return {"forget_quality": float(res.pvalue), "ks_statistic": float(res.statistic)}


def _lcs(a: list[str], b: list[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def _words(s: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", s.lower())


def rouge_l_recall(generated: str, reference: str) -> float:
    ref = _words(reference)
    return _lcs(_words(generated), ref) / len(ref) if ref else 0.0


@torch.no_grad()
def greedy_answers(model, tokenizer, questions: list[str], max_new_tokens: int = 24, batch: int = 16) -> list[str]:
    """Greedy continuations of "Question: q\\nAnswer:" (left-padded batches), up to the end of the line."""
    model.eval()
    pid, out = pad_id(tokenizer), []
    eos = tokenizer.eos_token_id
    for i in range(0, len(questions), batch):
        enc = [tokenizer(prompt_text(q), add_special_tokens=True)["input_ids"] for q in questions[i:i + batch]]
        n = max(len(e) for e in enc)
        ids = torch.full((len(enc), n), pid, dtype=torch.long)
        att = torch.zeros((len(enc), n), dtype=torch.long)
        for k, e in enumerate(enc):
            ids[k, n - len(e):] = torch.tensor(e)
            att[k, n - len(e):] = 1
        gen = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=pid, eos_token_id=eos)
        for row in gen[:, n:]:
            out.append(tokenizer.decode(row, skip_special_tokens=True).split("\n")[0].strip())
    return out


def set_utility(model, tokenizer, recs: list[dict], *, normalised_probability: bool, rouge: bool = True,
                table: dict | None = None) -> dict[str, float]:
    """{"probability", "truth_ratio", "rouge_l"} of one evaluation set (TOFU's per-set utility numbers)."""
    t = table or _loss_table(model, tokenizer, recs)
    p_true = torch.exp(-t["gt"])
    if normalised_probability:
        prob = (p_true / (p_true + torch.exp(-t["pert"]).sum(-1))).mean()
    else:
        prob = p_true.mean()
    r_util = torch.exp(-t["pert"]).mean(-1) / torch.exp(-t["para"])
    out = {"probability": float(prob), "truth_ratio": float(torch.clamp(1 - r_util, min=0).mean())}
    if rouge:
        gen = greedy_answers(model, tokenizer, [r["question"] for r in recs])
        out["rouge_l"] = sum(rouge_l_recall(g, r["answer"]) for g, r in zip(gen, recs, strict=True)) / len(recs)
    return out


def hmean(values: list[float]) -> float:
    if any(v <= 0 for v in values):
        return 0.0
    return len(values) / sum(1.0 / v for v in values)


def evaluate(model, tokenizer, *, forget: list[dict], retain: list[dict], world: list[dict], holdout: list[dict],
             rouge: bool = True) -> dict[str, Any]:
    """Everything one model gives: the forget set's truth ratios (for forget quality against a retain model), the
    forget-answer probability, utility (retain, world facts, model utility) and the MIA AUC."""
    tf = _loss_table(model, tokenizer, forget)
    r_forget = truth_ratio_stat(tf)
    ret = set_utility(model, tokenizer, retain, normalised_probability=False, rouge=rouge)
    wf = set_utility(model, tokenizer, world, normalised_probability=True, rouge=rouge)
    parts = list(ret.values()) + list(wf.values())
    hold = avg_losses(model, tokenizer, [(r["question"], r["answer"]) for r in holdout])
    mia = audit.auc(-tf["gt"], -hold) if holdout else None
    return {"forget_truth_ratios": r_forget, "forget_truth_ratio": float(torch.minimum(r_forget, 1 / r_forget).mean()),
            "forget_probability": float(torch.exp(-tf["gt"]).mean()), "retain": ret, "world_facts": wf,
            "model_utility": hmean(parts), "mia_auc": mia}


def template_probability(model, tokenizer, forget: list[dict], templates: list[str] | tuple[str, ...]) -> float:
    """Mean over forget questions and templates of exp(-avg loss) of a template answer."""
    pairs = [(r["question"], t) for r in forget for t in templates]
    return float(torch.exp(-avg_losses(model, tokenizer, pairs)).mean())
