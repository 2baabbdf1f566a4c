"""`praxon recommend import|train|evaluate|query`: import interactions, train recommenders, compare their metrics,
and score a history. Every command is a client of the public gRPC API (SERVICE_CLIS hook of services/cli/main.py)."""
from __future__ import annotations

import sys
from pathlib import Path

from services.common.client import upload, wait_for_success

METRIC_COLUMNS = ("recall_5", "recall_10", "recall_20", "ndcg_5", "ndcg_10", "ndcg_20")
# The demo trains for seconds, not hours: a small PreferDiff on MovieLens-100k (the paper's setting is dim 128+, up to
# 150 epochs with early stopping; benchmarks/recommendation/quality.py runs it).
DEMO_TRAIN = {"epochs": 5, "dim": 32, "lr": 3e-3, "batch_size": 128, "patience": 10, "seed": 0}
DEMO_HISTORY = ["50", "172", "181", "1", "121"]  # Star Wars, Empire Strikes Back, Return of the Jedi, Toy Story, ID4


def _stub(target):
    from praxon.recommendation.v1 import recommendation_pb2_grpc  # noqa: PLC0415

    return recommendation_pb2_grpc.RecommendationServiceStub(target.channel())


def _target(args):
    from services.common.client import resolve_target  # noqa: PLC0415

    return resolve_target(args.address, args.token, args.data_dir)


def _model_ref(text: str | None):
    from services.common.client import model_ref  # noqa: PLC0415
    from services.recommendation.settings import ServingConfig  # noqa: PLC0415 - light: no torch

    return model_ref(text, ServingConfig().default_model)


def import_dataset(target, *, builtin: str | None = None, path: Path | None = None, fmt: str = "",
                   name: str = "", out=None) -> str:
    from praxon.recommendation.v1 import recommendation_pb2 as pb  # noqa: PLC0415

    out = out or sys.stdout

    req = pb.StartImportInteractionsJobRequest(name=name)
    if path is not None:
        art = upload(target, path.name, path)
        out.write(f"uploaded {path.name}: artifact {art.id} ({art.size_bytes} bytes)\n")
        req.artifact_id = art.id
        if fmt:
            req.format = pb.DataFormat.Value(f"DATA_FORMAT_{fmt.upper()}")
    else:
        req.builtin = pb.BuiltinDataset.Value("BUILTIN_DATASET_" + (builtin or "ml-100k").upper().replace("-", "_"))
    job = wait_for_success(target, _stub(target).StartImportInteractionsJob(req, metadata=target.metadata).job, "import", out)
    r = job.result
    out.write(f"dataset {r['dataset_artifact_id']}: {int(r['n_users'])} users, {int(r['n_items'])} items, "
              f"{int(r['n_interactions'])} interactions (split {int(r['n_train_users'])}/{int(r['n_valid_users'])}/"
              f"{int(r['n_test_users'])} users)\n")
    return str(r["dataset_artifact_id"])


def train(target, dataset_id: str, kind: str, name: str, params: dict, *, promote: bool = False, out=None):
    out = out or sys.stdout
    from google.protobuf import struct_pb2  # noqa: PLC0415

    from praxon.models.v1 import models_pb2, models_pb2_grpc  # noqa: PLC0415
    from praxon.recommendation.v1 import recommendation_pb2 as pb  # noqa: PLC0415

    own = {f.name for f in pb.TrainingParams.DESCRIPTOR.fields}
    req = pb.StartTrainingJobRequest(dataset_artifact_id=dataset_id, model_name=name,
                                     model_kind=pb.ModelKind.Value(f"MODEL_KIND_{kind.upper()}"),
                                     params=pb.TrainingParams(**{k: v for k, v in params.items() if k in own}))
    if extra := {k: v for k, v in params.items() if k not in own}:
        s = struct_pb2.Struct()
        s.update(extra)
        req.extra_params.CopyFrom(s)
    job = wait_for_success(target, _stub(target).StartTrainingJob(req, metadata=target.metadata).job, f"{kind} training", out)
    m = job.models[0]
    metrics = dict(job.result["metrics"])
    out.write(f"registered {m.name} v{m.version}: best epoch {int(metrics['best_epoch'])}/"
              f"{int(metrics['epochs_run'])}, test Recall@10 {metrics['test_recall_10']:.4f}, "
              f"NDCG@10 {metrics['test_ndcg_10']:.4f}\n")
    if promote:
        models_pb2_grpc.ModelRegistryServiceStub(target.channel()).SetAlias(
            models_pb2.SetAliasRequest(name=m.name, alias="production", version=m.version), metadata=target.metadata)
        out.write(f"alias production -> {m.name} v{m.version}\n")
    return m


def metric_table(versions, out=None) -> None:
    """Test metrics stored with model versions (full catalogue, one held-out next item per test user)."""
    out = out or sys.stdout
    head = f"{'model':27} {'kind':11} " + " ".join(f"{c.replace('_', '@'):>9}" for c in METRIC_COLUMNS) + \
        f" {'best ep':>7}"
    out.write(head + "\n" + "-" * len(head) + "\n")
    for v in versions:
        cells = " ".join(f"{v.metrics.get('test_' + c, float('nan')):9.4f}" for c in METRIC_COLUMNS)
        kind = v.config["model_kind"] if "model_kind" in v.config else v.kind
        out.write(f"{v.name + ' v' + str(v.version):27} {kind:11} {cells} {int(v.metrics.get('best_epoch', 0)):>7}\n")


def print_recommendations(resp, out=None) -> None:
    out = out or sys.stdout
    r, m = resp.recommendations, resp.model
    how = "model" if r.fallback_reason == "" else f"fallback: {r.fallback_reason}"
    out.write(f"{m.name} v{m.version} ({m.model_kind}, {m.catalogue_size} items; {how}; "
              f"{r.history_items_used} history items used)\n")
    if r.unknown_item_ids:
        out.write(f"  unknown ids (ignored): {', '.join(r.unknown_item_ids)}\n")
    for rank, it in enumerate(r.items, 1):
        out.write(f"  {rank:3}. item {it.item_id:>8} (index {it.item_index:>6})  score {it.score:.4f}\n")


# ---------------------------------------------------------------------------------------------- commands
def cmd_import(args) -> None:
    target = _target(args)
    if bool(args.file) == bool(args.builtin):
        raise SystemExit("give a --file to upload or a --builtin dataset")
    import_dataset(target, builtin=args.builtin, path=Path(args.file) if args.file else None, fmt=args.format or "",
                   name=args.name or "")


def cmd_train(args) -> None:
    import json  # noqa: PLC0415

    target = _target(args)
    dataset = args.dataset or import_dataset(target, builtin=args.builtin)
    params = {k: v for k, v in (("epochs", args.epochs), ("dim", args.dim), ("lr", args.lr),
                                ("batch_size", args.batch_size), ("seed", args.seed)) if v is not None}
    for item in args.param or []:
        key, _, value = item.partition("=")
        params[key] = json.loads(value)
    train(target, dataset, args.kind, args.name, params, promote=args.promote)


def cmd_evaluate(args) -> None:
    from praxon.models.v1 import models_pb2, models_pb2_grpc  # noqa: PLC0415

    target = _target(args)
    reg = models_pb2_grpc.ModelRegistryServiceStub(target.channel())
    versions = []
    for text in args.models or ["recommender"]:
        ref = _model_ref(text)
        if ref.version or ref.alias:
            versions.append(reg.GetModelVersion(models_pb2.GetModelVersionRequest(model=ref),
                                                metadata=target.metadata).version)
        else:
            versions += reg.ListModelVersions(models_pb2.ListModelVersionsRequest(name=ref.name),
                                              metadata=target.metadata).versions
    metric_table(versions)


def cmd_query(args) -> None:
    from praxon.recommendation.v1 import recommendation_pb2 as pb  # noqa: PLC0415

    target = _target(args)
    history = pb.History(item_indices=[int(x) for x in args.items]) if args.indices else pb.History(
        item_ids=args.items)
    resp = _stub(target).Recommend(pb.RecommendRequest(model=_model_ref(args.model), history=history, k=args.k,
                                                       exclude_seen=args.exclude_seen), metadata=target.metadata)
    print_recommendations(resp)


def add_commands(sub, client_opts) -> None:
    p = sub.add_parser("recommend", help="sequential recommendation: import, train, evaluate, query")
    rsub = p.add_subparsers(dest="action", required=True)

    sp = rsub.add_parser("import", help="import interactions (CSV/Parquet: user,item,timestamp[,rating]) or a builtin")
    client_opts(sp)
    sp.add_argument("--file", help="CSV or Parquet file to upload")
    sp.add_argument("--format", choices=["csv", "tsv", "parquet"], help="default: sniffed")
    sp.add_argument("--builtin", choices=["ml-100k", "synthetic"])
    sp.add_argument("--name", help="dataset artifact name")
    sp.set_defaults(func=cmd_import)

    sp = rsub.add_parser("train", help="train a recommender (a job; watched to its end)")
    client_opts(sp)
    sp.add_argument("--dataset", help="dataset artifact id (default: import --builtin first)")
    sp.add_argument("--builtin", default="ml-100k", choices=["ml-100k", "synthetic"])
    sp.add_argument("--kind", default="preferdiff", choices=["preferdiff", "dreamrec", "sasrec_ce", "popularity"])
    sp.add_argument("--name", default="recommender", help="registered model name")
    sp.add_argument("--epochs", type=int)
    sp.add_argument("--dim", type=int)
    sp.add_argument("--lr", type=float)
    sp.add_argument("--batch-size", type=int)
    sp.add_argument("--seed", type=int)
    sp.add_argument("--param", action="append", help="any training parameter as NAME=JSON, e.g. guidance_w=4")
    sp.add_argument("--promote", action="store_true", help="point the 'production' alias at the new version")
    sp.set_defaults(func=cmd_train)

    sp = rsub.add_parser("evaluate", help="metric table (test Recall/NDCG@5,10,20) of registered versions")
    client_opts(sp)
    sp.add_argument("models", nargs="*", help="name (every version), name:VERSION or name@ALIAS")
    sp.set_defaults(func=cmd_evaluate)

    sp = rsub.add_parser("query", help="top-k items for a history (oldest first)")
    client_opts(sp)
    sp.add_argument("items", nargs="*", help="raw item ids (or catalogue indices with --indices); none: empty history")
    sp.add_argument("--indices", action="store_true")
    sp.add_argument("--k", type=int, default=10)
    sp.add_argument("--exclude-seen", action="store_true")
    sp.add_argument("--model", help="name, name:VERSION or name@ALIAS (default recommender@production)")
    sp.set_defaults(func=cmd_query)


# ---------------------------------------------------------------------------------------------- demo step
def demo(target) -> None:
    """`praxon demo` step: import MovieLens-100k, train a demo-sized PreferDiff and the popularity baseline, promote
    PreferDiff, score a new history (and an empty one), print the metric table."""
    import time  # noqa: PLC0415

    import grpc  # noqa: PLC0415

    from praxon.models.v1 import models_pb2, models_pb2_grpc  # noqa: PLC0415
    from praxon.recommendation.v1 import recommendation_pb2 as pb  # noqa: PLC0415

    dataset = import_dataset(target, builtin="ml-100k")
    print(f"training PreferDiff, demo-sized for speed ({DEMO_TRAIN['epochs']} epochs, dim {DEMO_TRAIN['dim']}; the "
          "paper trains up to 150 epochs with early stopping: expect demo metrics well below a full run)")
    pd_model = train(target, dataset, "preferdiff", "recommender", DEMO_TRAIN, promote=True)
    pop = train(target, dataset, "popularity", "recommender-popularity", {})
    stub = _stub(target)
    for history in (DEMO_HISTORY, []):
        req = pb.RecommendRequest(history=pb.History(item_ids=history), k=5, exclude_seen=True)
        for _ in range(60):  # the first request loads the model; UNAVAILABLE asks to retry shortly
            try:
                resp = stub.Recommend(req, metadata=target.metadata)
                break
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                time.sleep(1.0)
        else:
            raise SystemExit("the recommender did not load in time")
        print(f"history {history or '(empty)'} -> ", end="")
        print_recommendations(resp)
    reg = models_pb2_grpc.ModelRegistryServiceStub(target.channel())
    versions = [reg.GetModelVersion(models_pb2.GetModelVersionRequest(model=m), metadata=target.metadata).version
                for m in (pd_model, pop)]
    print("test metrics over the full catalogue (one held-out next item per test user):")
    metric_table(versions)
