"""Training a small causal LM from scratch: a byte-level BPE tokenizer (`tokenizers`) and a Llama-type model
(transformers' LlamaConfig / LlamaForCausalLM), as a Steps job (services.common.jobcontext.run_steps owns resume,
cancellation, checkpoints and progress).

Each document is one training sequence (truncated to max_seq_len, padded; padding is masked out of the loss), so
a retrieval document's answer is always predicted from its own records. Batches are drawn with a generator seeded by
(seed, step): a resumed run sees the same batches as an uninterrupted one. With copy_warmup_steps, the first steps
draw from the copy documents alone (a curriculum: corpus.copy_document). The learning rate follows linear warmup
then cosine decay (AdamW). Validation perplexity = exp(mean token NLL over the held-out documents)."""
from __future__ import annotations

import json
import math
import random
import time
from typing import Any

import torch

from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext
from services.generation import corpus as builtin
from services.generation.params import TrainParams


def train_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE (digits split one per token, so numbers are copied digit by digit) -> a transformers
    PreTrainedTokenizerFast with <|endoftext|> as bos/eos and <pad> as padding."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[builtin.EOS, builtin.PAD],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return wrap_tokenizer(tok.to_str())


def wrap_tokenizer(tokenizer_json: str):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tokenizer_json), bos_token=builtin.EOS,
                                   eos_token=builtin.EOS, pad_token=builtin.PAD, clean_up_tokenization_spaces=False)


def read_corpus(data: bytes, field: str = "corpus_artifact_id") -> list[str]:
    """UTF-8 text, one document per line, or JSONL with a "text" field per line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(field, "the corpus must be UTF-8 text or JSONL") from None
    docs = []
    for i, line in enumerate(text.splitlines()):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise InvalidArgument(field, f"line {i + 1} starts with '{{' but is not JSON") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise InvalidArgument(field, f"line {i + 1}: a JSONL line needs a string \"text\" field")
            line = obj["text"].strip()
        if line:
            docs.append(line)
    if len(docs) < 10:
        raise InvalidArgument(field, "the corpus needs at least 10 non-empty documents")
    return docs


def model_config(p: TrainParams, vocab_size: int, tokenizer) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab_size, hidden_size=p.hidden_size, intermediate_size=4 * p.hidden_size,
                       num_hidden_layers=p.num_layers, num_attention_heads=p.num_heads,
                       num_key_value_heads=p.num_kv_heads or p.num_heads, max_position_embeddings=p.max_seq_len,
                       rms_norm_eps=1e-5, initializer_range=p.init_std, tie_word_embeddings=True,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id)


class LanguageModelTraining:
    """The training job as Steps: one step = one optimizer update on one batch."""

    def __init__(self, p: TrainParams):
        self.p = p
        self.total = p.steps

    def setup(self, ctx: JobContext) -> None:
        from transformers import LlamaForCausalLM

        p = self.p
        if p.corpus_artifact_id:
            docs = read_corpus(ctx.read_artifact(p.corpus_artifact_id), "params.corpus_artifact_id")
            self.source = f"artifact:{p.corpus_artifact_id}"
        else:
            only_records = p.builtin_tasks == "records"
            docs = builtin.builtin_corpus(p.seed, n_retrieval=p.builtin_retrieval_docs,
                                          min_records=p.builtin_min_records, max_records=p.builtin_max_records,
                                          lookups=p.builtin_lookups, qa_repeats=0 if only_records else 6,
                                          n_passkey=0 if only_records else None,
                                          n_multidoc=0 if only_records else None, n_copy=p.builtin_copy_docs,
                                          value_words=p.builtin_value_words)
            self.source = "builtin"
        rng = random.Random(p.seed)
        order = list(range(len(docs)))
        rng.shuffle(order)
        n_val = max(1, int(len(docs) * p.validation_fraction))
        self.val_docs = [docs[i] for i in order[:n_val]]
        self.train_docs = [docs[i] for i in order[n_val:]]
        torch.manual_seed(p.seed)
        self.tokenizer = train_tokenizer(self.train_docs, p.vocab_size)
        self.config = model_config(p, len(self.tokenizer), self.tokenizer)
        self.model = LlamaForCausalLM(self.config)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=p.lr, weight_decay=p.weight_decay,
                                     betas=(0.9, 0.95))
        eos = self.tokenizer.eos_token_id
        self.train_ids = [ids[: p.max_seq_len] for ids in
                          (self.tokenizer(d)["input_ids"] + [eos] for d in self.train_docs)]
        self.val_ids = [ids[: p.max_seq_len] for ids in
                        (self.tokenizer(d)["input_ids"] + [eos] for d in self.val_docs)]
        # the copy documents' places in train_ids: the first copy_warmup_steps batches are drawn from them alone
        self.copy_idx = [i for i, d in enumerate(self.train_docs) if builtin.is_copy_document(d)]
        if p.copy_warmup_steps and not self.copy_idx:
            raise InvalidArgument("params.copy_warmup_steps", "the corpus has no copy documents to warm up on")
        self.losses: list[float] = []
        self.tokens_seen = 0
        self.started = time.monotonic()
        self.steps_this_run = 0
        self.run_tokens = 0

    def _batch(self, seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pad = self.tokenizer.pad_token_id
        n = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), n), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), n), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        labels = ids.masked_fill(mask == 0, -100)
        return ids, mask, labels

    def _lr(self, i: int) -> float:
        p = self.p
        if i < p.warmup_steps:
            return p.lr * (i + 1) / p.warmup_steps
        t = (i - p.warmup_steps) / max(1, p.steps - p.warmup_steps)
        return p.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))

    def step(self, i: int) -> dict[str, float]:
        g = torch.Generator().manual_seed(self.p.seed * 1_000_003 + i)
        if i < self.p.copy_warmup_steps:  # the curriculum's first phase: copy documents only
            idx = [self.copy_idx[j] for j in torch.randint(len(self.copy_idx), (self.p.batch_size,), generator=g)]
        else:
            idx = torch.randint(len(self.train_ids), (self.p.batch_size,), generator=g).tolist()
        ids, mask, labels = self._batch([self.train_ids[j] for j in idx])
        for group in self.opt.param_groups:
            group["lr"] = self._lr(i)
        self.model.train()
        loss = self.model(input_ids=ids, attention_mask=mask, labels=labels).loss
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.losses.append(float(loss.detach()))
        self.tokens_seen += int(mask.sum())
        self.run_tokens += int(mask.sum())
        self.steps_this_run += 1
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = self.steps_this_run / elapsed
        return {"loss": self.losses[-1], "tokens_per_s": self.run_tokens / elapsed, "lr": self._lr(i),
                "eta_s": (self.total - i - 1) / max(rate, 1e-9)}

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "losses": list(self.losses),
                "tokens_seen": self.tokens_seen, "tokenizer": self.tokenizer.backend_tokenizer.to_str()}

    def load_state(self, state: dict[str, Any]) -> None:
        if state["tokenizer"] != self.tokenizer.backend_tokenizer.to_str():
            self.tokenizer = wrap_tokenizer(state["tokenizer"])
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.losses = [float(x) for x in state["losses"]]
        self.tokens_seen = int(state["tokens_seen"])

    @torch.no_grad()
    def validation_nll(self) -> float:
        self.model.eval()
        total, count = 0.0, 0
        for s in range(0, len(self.val_ids), 32):
            ids, mask, labels = self._batch(self.val_ids[s: s + 32])
            logits = self.model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            tgt = labels[:, 1:]
            nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                                    ignore_index=-100, reduction="sum")
            total += float(nll)
            count += int((tgt != -100).sum())
        return total / max(count, 1)

    def result(self, ctx: JobContext) -> dict[str, Any]:
        from services.common import hf

        ctx.progress(0.995, "validating")
        nll = self.validation_nll()
        ppl = math.exp(min(nll, 50.0))
        tensors, config = hf.from_pretrained_objects(self.model, self.tokenizer)
        config["training"] = {**self.p.model_dump(), "source": self.source, "train_docs": len(self.train_docs),
                              "val_docs": len(self.val_docs)}
        tail = self.losses[-20:]
        metrics = {"validation_perplexity": ppl, "validation_nll": nll, "final_loss": sum(tail) / len(tail),
                   "tokens_seen": float(self.tokens_seen),
                   "parameters": float(sum(p.numel() for p in self.model.parameters()))}
        info = ctx.register_model(self.p.model_name, tensors, kind=hf.REGISTRY_KIND, config=config, metrics=metrics,
                                  dataset_artifact_id=self.p.corpus_artifact_id)
        ctx.progress(1.0, "model registered", validation_perplexity=ppl)
        return {"model_version_id": info.model_version_id, "model_name": info.name, "metrics": metrics,
                "losses": self.losses}
