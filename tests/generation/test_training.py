"""The training job on InMemoryJobContext: a tiny run registers a loadable HF-format version with validation
perplexity; a run cancelled mid-way resumes from its checkpoint and its loss curve continues exactly; bad
parameters name their field."""
from __future__ import annotations

import math

import pytest

from services.common import hf
from services.common.errors import Cancelled, InvalidArgument
from services.common.jobcontext import InMemoryJobContext
from services.generation import corpus
from services.generation.jobs import run_training

TINY = {"steps": 8, "batch_size": 4, "hidden_size": 32, "num_layers": 2, "num_heads": 2, "vocab_size": 320,
        "builtin_retrieval_docs": 60, "builtin_max_records": 3, "max_seq_len": 96, "steps_per_checkpoint": 3,
        "warmup_steps": 2, "model_name": "tiny-test"}


def test_tiny_training_registers_a_loadable_model():
    ctx = InMemoryJobContext(params=dict(TINY), kind="generation.train")
    result = run_training(ctx)
    assert len(result["losses"]) == 8 and result["losses"][-1] < result["losses"][0]
    m = result["metrics"]
    assert math.isfinite(m["validation_perplexity"]) and 1 < m["validation_perplexity"] < 320
    info, tensors, config, lineage = ctx.models[result["model_version_id"]]
    assert info.version is None and lineage["kind"] == hf.REGISTRY_KIND
    model, tok = hf.load_model(tensors, config)
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 2
    ids = tok(corpus.fact_text(corpus.entities(0)[0][0]))["input_ids"]
    assert len(ids) > 3 and tok.decode(ids) == corpus.fact_text(corpus.entities(0)[0][0])
    metrics = [e[2] for e in ctx.events if "loss" in e[2]]
    assert {"loss", "tokens_per_s", "eta_s"} <= set(metrics[0]) and metrics[-1]["eta_s"] == 0


def test_a_cancelled_run_resumes_and_its_loss_curve_continues():
    straight = run_training(InMemoryJobContext(params=dict(TINY), kind="generation.train"))["losses"]
    ctx = InMemoryJobContext(params=dict(TINY), kind="generation.train", cancel_after_progress=5)
    with pytest.raises(Cancelled):
        run_training(ctx)
    assert ctx.checkpoints_saved == 1  # after step 3 (steps_per_checkpoint=3); steps 4-5 are redone
    ctx.cancel_after_progress = None
    resumed = run_training(ctx)["losses"]
    assert resumed == straight


def test_bad_parameters_name_their_field():
    for params, field in [({"steps": 0}, "params.steps"), ({"lr": -1.0}, "params.lr"),
                          ({"hidden_size": 30, "num_heads": 4}, "params.num_heads"), ({"nope": 1}, "params.nope"),
                          ({"model_name": "bad name!"}, "params.model_name")]:
        with pytest.raises(InvalidArgument) as e:
            run_training(InMemoryJobContext(params=params, kind="generation.train"))
        assert e.value.violations[0].field == field, params


def test_corpus_artifacts_are_read_as_text_or_jsonl():
    from services.generation.training import read_corpus

    assert read_corpus(("\n".join(f"doc {i}" for i in range(12))).encode())[3] == "doc 3"
    assert read_corpus(("\n".join('{"text": "doc %d"}' % i for i in range(12))).encode())[0] == "doc 0"
    with pytest.raises(InvalidArgument, match="at least 10"):
        read_corpus(b"one\ntwo")
    with pytest.raises(InvalidArgument, match="UTF-8"):
        read_corpus(b"\xff\xfe" * 20)


def test_the_records_only_builtin_corpus():
    """builtin_tasks="records": every training document is a key-value record document within the record range,
    with min(lookups, records) lookups; a record range upside down names its field."""
    from services.generation.params import TrainParams
    from services.generation.training import LanguageModelTraining

    job = LanguageModelTraining(TrainParams(**{**TINY, "builtin_tasks": "records", "builtin_min_records": 3,
                                               "builtin_max_records": 5, "builtin_lookups": 4}))
    job.setup(InMemoryJobContext(params={}, kind="generation.train"))
    docs = job.train_docs + job.val_docs
    assert len(docs) == 60 and all(d.startswith("records : ") for d in docs)
    for d in docs:
        n_records = d.split(" ; lookup ")[0].count(" ; ") + 1
        assert 3 <= n_records <= 5 and d.count("lookup ") == min(4, n_records), d
    with pytest.raises(InvalidArgument) as e:
        run_training(InMemoryJobContext(params={"builtin_min_records": 6, "builtin_max_records": 5},
                                        kind="generation.train"))
    assert e.value.violations[0].field == "params.builtin_max_records"


def test_the_copy_warm_up_trains_on_copy_documents_first():
    """copy_warmup_steps: the first steps' batches hold copy documents only, later ones any document (drawn from
    (seed, step) like every batch, so a resumed run sees the same); a warm-up without copy documents names its
    field."""
    from services.generation.params import TrainParams
    from services.generation.training import LanguageModelTraining

    job = LanguageModelTraining(TrainParams(**{**TINY, "builtin_tasks": "records", "builtin_copy_docs": 20,
                                               "copy_warmup_steps": 3, "steps": 6}))
    job.setup(InMemoryJobContext(params={}, kind="generation.train"))
    assert len(job.copy_idx) == sum(map(corpus.is_copy_document, job.train_docs)) > 10
    drawn = []
    job._batch = lambda seqs: drawn.append(seqs) or LanguageModelTraining._batch(job, seqs)
    for i in range(6):
        job.step(i)
    copies = {tuple(job.train_ids[i]) for i in job.copy_idx}
    assert all(tuple(s) in copies for batch in drawn[:3] for s in batch)
    assert any(tuple(s) not in copies for batch in drawn[3:] for s in batch)
    with pytest.raises(InvalidArgument) as e:
        run_training(InMemoryJobContext(params={"copy_warmup_steps": 5}, kind="generation.train"))
    assert e.value.violations[0].field == "params.copy_warmup_steps"
