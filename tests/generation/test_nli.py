"""The NLI models behind semantic uncertainty (services.generation.nli): the generated pairs, the registry format
(round trip of a sequence-classification model, refusal of what is not an NLI classifier), the training job's
Steps in process (resume gives the same weights), and the contradiction gradient. The job through a real worker
and the gRPC surface are in test_uncertainty.py."""
from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from services.common.errors import InvalidArgument
from services.generation import nli


def tiny_nli(seed: int = 0):
    """A random tiny BertForSequenceClassification (3 NLI classes) with the packaged MiniLM tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from services.common.minilm import base_model_path

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(base_model_path(), local_files_only=True)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128, num_labels=3,
                     id2label=dict(enumerate(nli.LABELS)), label2id={k: i for i, k in enumerate(nli.LABELS)})
    return BertForSequenceClassification(cfg).eval(), tok


def test_pairs_are_balanced_labelled_and_seeded():
    pairs = nli.make_pairs(900, seed=3)
    assert pairs == nli.make_pairs(900, seed=3) and pairs != nli.make_pairs(900, seed=4)
    labels = Counter(p.label for p in pairs)
    assert all(abs(labels[k] - 300) <= 1 for k in (nli.CONTRADICTION, nli.NEUTRAL, nli.ENTAILMENT)), labels
    kinds = Counter(p.kind for p in pairs)
    assert set(kinds) == set(nli.KINDS)
    for p in pairs:
        assert p.premise and p.hypothesis
        want = {"paraphrase": nli.ENTAILMENT, "unrelated": nli.NEUTRAL}.get(p.kind, nli.CONTRADICTION)
        assert p.label == want
        if p.kind in ("attribute", "number", "negation"):  # a contradiction changes the text
            assert p.premise != p.hypothesis


def test_registry_round_trip_gives_the_same_logits():
    model, tok = tiny_nli()
    tensors, config = nli.registry_parts(model, tok)
    assert config["format"] == nli.NLI_FORMAT and config["labels"] == {"contradiction": 0, "neutral": 1,
                                                                         "entailment": 2}
    loaded = nli.load(tensors, config)
    ref = nli.NLIModel(model, tok, config["labels"])
    p, h = ["Q: capital of France? A: Paris", "It rained."], ["Q: capital of France? A: Lyon", "The sun shone."]
    assert torch.allclose(loaded.logits(p, h), ref.logits(p, h), atol=1e-5)


def test_label_order_follows_the_checkpoint(tmp_path):
    """A checkpoint with another label order (e.g. roberta-large-mnli's CONTRADICTION/NEUTRAL/ENTAILMENT in caps,
    or a permutation) is read in the canonical order."""
    model, tok = tiny_nli()
    model.config.id2label = {0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}
    tensors, config = nli.registry_parts(model, tok)
    assert config["labels"] == {"entailment": 0, "neutral": 1, "contradiction": 2}
    loaded = nli.load(tensors, config)
    raw = model(**tok(["a"], ["b"], return_tensors="pt")).logits[0]
    assert torch.allclose(loaded.logits(["a"], ["b"])[0], raw.flip(0), atol=1e-5)


def _files(model, tok, path):
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return {f.name: f.read_bytes() for f in path.iterdir() if f.is_file()}


def test_what_is_not_an_nli_classifier_is_refused(tmp_path):
    model, tok = tiny_nli()
    files = _files(model, tok, tmp_path / "ok")
    nli.to_registry(files, "path")  # accepted
    cfg = json.loads(files["config.json"])
    cases = {
        "labels": {**cfg, "id2label": {"0": "negative", "1": "neutral", "2": "positive"}},
        "architecture": {**cfg, "architectures": ["BertForMaskedLM"]},
        "family": {**cfg, "model_type": "llama"},
        "remote code": {**cfg, "auto_map": {"AutoModel": "x.Y"}},
    }
    for what, bad in cases.items():
        with pytest.raises(InvalidArgument) as e:
            nli.to_registry({**files, "config.json": json.dumps(bad).encode()}, "params.path")
        assert e.value.violations[0].field == "params.path", what
    pickled = {k: v for k, v in files.items() if not k.endswith(".safetensors")} | {"pytorch_model.bin": b"x"}
    with pytest.raises(InvalidArgument, match="pickle"):
        nli.to_registry(pickled, "path")
    with pytest.raises(InvalidArgument, match="tokenizer"):
        nli.to_registry({k: v for k, v in files.items() if k not in nli.TOKENIZER_FILES}, "path")


def test_contradiction_gradient_is_the_gradient_of_the_cross_entropy():
    model, tok = tiny_nli(1)
    m = nli.NLIModel(model, tok, {k: i for i, k in enumerate(nli.LABELS)})
    enc, grad, emb = m.contradiction_gradient("Q: where? A: Paris", "Q: where? A: Paris")
    assert all(p.grad is None for p in model.parameters())  # nothing accumulated in the weights
    ids = enc["input_ids"][None]
    e = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(model(inputs_embeds=e, token_type_ids=tok(
        "Q: where? A: Paris", "Q: where? A: Paris", return_tensors="pt")["token_type_ids"]).logits,
        torch.tensor([nli.CONTRADICTION]))
    loss.backward()
    assert torch.allclose(grad, e.grad[0], atol=1e-6) and torch.allclose(emb, e[0].detach())
    assert enc["sequence_ids"][1] == 0 and enc["sequence_ids"][-2] == 1


def test_training_steps_resume_to_the_same_weights(monkeypatch):
    """The job's Steps: a run cut after 2 steps and resumed from its checkpoint ends with the weights of an
    uninterrupted run (the batch of step i is a function of the seed and i)."""
    from services.common.jobcontext import InMemoryJobContext, run_steps
    from services.common.errors import Cancelled
    from services.generation.params import NLITrainParams

    torch.set_num_threads(1)
    p = NLITrainParams(steps=3, batch_size=4, train_pairs=24, heldout_pairs=12, steps_per_checkpoint=1)
    whole = InMemoryJobContext(params={}, kind="generation.nli_train")
    res = run_steps(whole, nli.NLITraining(p), checkpoint_every=1)
    assert len(res["losses"]) == 3 and 0 <= res["metrics"]["heldout_accuracy"] <= 1
    assert res["description"] == nli.STAND_IN
    cut = InMemoryJobContext(params={}, kind="generation.nli_train", cancel_after_progress=2)
    with pytest.raises(Cancelled):
        run_steps(cut, nli.NLITraining(p), checkpoint_every=1)
    again = InMemoryJobContext(params={}, kind="generation.nli_train", checkpoint=cut.checkpoint)
    res2 = run_steps(again, nli.NLITraining(p), checkpoint_every=1)
    assert res2["losses"] == pytest.approx(res["losses"], abs=1e-6)
    (_, t1, _, lin1), (_, t2, _, _) = next(iter(whole.models.values())), next(iter(again.models.values()))
    assert all(torch.allclose(t1[k], t2[k], atol=1e-6) for k in t1)
    assert lin1["kind"] == nli.REGISTRY_KIND and "heldout_accuracy_negation" in lin1["metrics"]
