"""`praxon unlearn ...`: train a certified head, forget records, audit, list records, export a report; and the
README demo step. A plain client of the public gRPC API (UnlearningService, ArtifactService, ModelRegistry)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported where used, so that `praxon --help` loads no grpc)
    from praxon.common.v1 import common_pb2
    from praxon.unlearning.v1 import unlearning_pb2 as pb, unlearning_pb2_grpc
    from services.common.client import Target

DATASET_CONTENT_TYPE = "application/vnd.praxon.dataset+safetensors"
METHOD_NAMES = ["certified_noisy_minimizer", "robust_certified", "noisy_finetune", "retrain", "finetune",
                "gradient_ascent", "flat", "npo"]
KIND_NAMES = ["softmax_l2", "logreg_l2", "ridge_l2"]


def _stub(target: Target) -> unlearning_pb2_grpc.UnlearningServiceStub:
    from praxon.unlearning.v1 import unlearning_pb2_grpc

    return unlearning_pb2_grpc.UnlearningServiceStub(target.channel())


def synthetic_guard_data(n: int = 600, dim: int = 16, classes: int = 3, n_eval: int = 300, seed: int = 0
                         ) -> tuple[bytes, bytes, list[str]]:
    """A guard-head training set over unit-norm features (like frozen encoder embeddings), with record ids
    "msg-<i>", and a held-out set. Labels: 0 safe, 1 harassment, 2 self-harm (illustrative)."""
    from services.unlearning.data import encode_dataset
    from services.unlearning.synthetic import blobs

    X, y = blobs(n + n_eval, dim, classes, seed=seed)
    ids = [f"msg-{i:05d}" for i in range(n)]
    meta = {"description": "synthetic guard features (unit-norm), labels 0 safe / 1 harassment / 2 self-harm"}
    return (encode_dataset(X[:n].float(), y[:n], ids, meta), encode_dataset(X[n:].float(), y[n:], None, meta), ids)


def _model_ref(text: str) -> common_pb2.ModelRef:
    from services.common.client import model_ref

    return model_ref(text)


def _finish(target: Target, job: common_pb2.Job, wait: bool) -> common_pb2.Job:
    from services.common.client import state_name, wait_for_success

    print(f"job {job.id} ({job.kind}) {state_name(job.state)}")
    return wait_for_success(target, job) if wait else job


def format_certificate(c: pb.Certificate) -> str:
    if not c.certified:
        return "uncertified (approximate method)"
    return (f"({c.epsilon:g}, {c.delta:g})-certified: r={c.radius:.3g} sigma={c.sigma:.4g} steps={c.steps} "
            f"gradient evaluations={c.gradient_evaluations} final |grad|={c.final_gradient_norm:.3g} start={c.start}")


def print_record(rec: pb.UnlearningRecord, out=None) -> None:
    from praxon.common.v1 import common_pb2
    from praxon.unlearning.v1 import unlearning_pb2 as pb
    from services.common.client import state_name

    w = (out or sys.stdout).write  # looked up at call time, so redirected stdout is honoured
    w(f"record {rec.id}  {state_name(rec.state)}  method={pb.Method.Name(rec.method).removeprefix('METHOD_').lower()}\n")
    w(f"  requested by token {rec.requester.token_name or '-'} ({rec.requester.token_id or '-'}) "
      f"at {rec.create_time.ToDatetime():%Y-%m-%d %H:%M:%S}Z; reason: {rec.reason or '-'}\n")
    w(f"  forgot {len(rec.forget_record_ids)} records of dataset {rec.dataset_artifact_id} from "
      f"{rec.source_model.name} v{rec.source_model.version}\n")
    if rec.state == common_pb2.JOB_STATE_SUCCEEDED:
        w(f"  new version: {rec.new_model.name} v{rec.new_model.version} ({rec.new_model_version_id}), "
          f"regime {rec.regime or '-'}\n")
        w(f"  certificate: {format_certificate(rec.certificate)}\n")
        if rec.metrics:
            w("  metrics: " + " ".join(f"{k}={v:.4g}" for k, v in sorted(rec.metrics.items())) + "\n")
    elif rec.error.reason:
        w(f"  error: {rec.error.reason}: {rec.error.message}\n")
    for a in rec.audits:
        verdict = "VIOLATED" if a.violated else "ok"
        w(f"  audit {a.job_id} {state_name(a.state)}: empirical eps >= {a.epsilon_lower_bound:.4g} vs claimed "
          f"{a.claimed_epsilon:g} ({verdict}); pre-noise distance {a.pre_noise_distance:.3g} <= 2r "
          f"{a.sensitivity_bound:.3g}\n")


# ---- commands ------------------------------------------------------------------------------------------------
def cmd_train(args) -> None:
    from praxon.common.v1 import common_pb2
    from praxon.unlearning.v1 import unlearning_pb2 as pb
    from services.common.client import new_idempotency_key, resolve_target, upload
    from services.common.convert import from_struct

    target = resolve_target(args.address, args.token, args.data_dir)
    if args.dataset_artifact:
        ds_id, ev_id = args.dataset_artifact, args.eval_artifact or ""
    elif args.dataset:
        ds_id = upload(target, Path(args.dataset).name, Path(args.dataset).read_bytes(), DATASET_CONTENT_TYPE).id
        ev_id = upload(target, Path(args.eval).name, Path(args.eval).read_bytes(), DATASET_CONTENT_TYPE).id \
            if args.eval else ""
    else:
        train, ev, _ = synthetic_guard_data(seed=args.seed)
        ds_id = upload(target, "synthetic-guard-train.safetensors", train, DATASET_CONTENT_TYPE).id
        ev_id = upload(target, "synthetic-guard-eval.safetensors", ev, DATASET_CONTENT_TYPE).id
        print(f"uploaded synthetic guard features: train {ds_id} (record ids msg-00000..), eval {ev_id}")
    req = pb.StartTrainingJobRequest(dataset_artifact_id=ds_id, kind=pb.ModelKind.Value(f"MODEL_KIND_{args.kind.upper()}"),
                                     name=args.name, mu=args.mu, seed=args.seed, capacity=args.capacity,
                                     eval_dataset_artifact_id=ev_id, idempotency_key=new_idempotency_key())
    for k in ("r", "epsilon", "delta"):
        if getattr(args, k) is not None:
            setattr(req, k, getattr(args, k))
    job = _finish(target, _stub(target).StartTrainingJob(req, metadata=target.metadata).job, not args.no_wait)
    if job.state == common_pb2.JOB_STATE_SUCCEEDED:
        print(f"trained {', '.join(f'{m.name} v{m.version}' for m in job.models)}: "
              f"{json.dumps(from_struct(job.result).get('metrics', {}), sort_keys=True)}")


def _ids(args) -> list[str]:
    ids = [i for i in (args.ids or "").split(",") if i]
    if args.ids_file:
        ids += [line.strip() for line in Path(args.ids_file).read_text().splitlines() if line.strip()]
    return ids


def cmd_forget(args) -> None:
    from praxon.unlearning.v1 import unlearning_pb2 as pb
    from services.common.client import new_idempotency_key, resolve_target

    target = resolve_target(args.address, args.token, args.data_dir)
    req = pb.StartUnlearningJobRequest(model=_model_ref(args.model), forget_record_ids=_ids(args),
                                       forget_set_artifact_id=args.forget_set or "",
                                       method=pb.Method.Value(f"METHOD_{args.method.upper()}"), seed=args.seed,
                                       reason=args.reason or "", name=args.name or "",
                                       eval_dataset_artifact_id=args.eval_artifact or "",
                                       idempotency_key=new_idempotency_key())
    for k in ("epsilon", "delta"):
        if getattr(args, k) is not None:
            setattr(req, k, getattr(args, k))
    if args.method in ("flat", "npo") or args.lm_epochs or args.lm_lr or args.divergence or args.full:
        lm = req.language_model  # causal language models (flat, npo, gradient_ascent)
        lm.adaptation = pb.ADAPTATION_FULL if args.full else pb.ADAPTATION_LORA
        lm.epochs, lm.learning_rate = args.lm_epochs or 0, args.lm_lr or 0.0
        if args.divergence:
            lm.divergence = pb.FlatDivergence.Value("FLAT_DIVERGENCE_" + args.divergence.upper())
    resp = _stub(target).StartUnlearningJob(req, metadata=target.metadata)
    print(f"unlearning record {resp.record_id}")
    _finish(target, resp.job, not args.no_wait)
    if not args.no_wait:
        print_record(_get_record(target, resp.record_id))


def _get_record(target: Target, record_id: str) -> pb.UnlearningRecord:
    from praxon.unlearning.v1 import unlearning_pb2 as pb

    return _stub(target).GetUnlearningRecord(pb.GetUnlearningRecordRequest(record_id=record_id),
                                             metadata=target.metadata).record


def cmd_audit(args) -> None:
    from praxon.common.v1 import common_pb2
    from praxon.unlearning.v1 import unlearning_pb2 as pb
    from services.common.client import new_idempotency_key, resolve_target

    target = resolve_target(args.address, args.token, args.data_dir)
    req = pb.StartAuditJobRequest(record_id=args.record or "", runs=args.runs, seed=args.seed,
                                  idempotency_key=new_idempotency_key())
    if args.model:
        req.model.CopyFrom(_model_ref(args.model))
    job = _finish(target, _stub(target).StartAuditJob(req, metadata=target.metadata).job, not args.no_wait)
    if args.record and job.state == common_pb2.JOB_STATE_SUCCEEDED:
        print_record(_get_record(target, args.record))
    elif job.state == common_pb2.JOB_STATE_SUCCEEDED:
        ea = job.result["epsilon_audit"]
        print(f"empirical eps >= {ea['eps_lower']:.4g} (claimed {ea['claimed_epsilon']:g}, "
              f"violated={ea['violated']})")


def cmd_records(args) -> None:
    from praxon.unlearning.v1 import unlearning_pb2 as pb
    from services.common.client import resolve_target, state_name

    target = resolve_target(args.address, args.token, args.data_dir)
    if args.record_id:
        print_record(_get_record(target, args.record_id))
        return
    resp = _stub(target).ListUnlearningRecords(pb.ListUnlearningRecordsRequest(page_size=args.limit,
                                                                               model_name=args.model or ""),
                                               metadata=target.metadata)
    for rec in resp.records:
        new = f"-> {rec.new_model.name} v{rec.new_model.version}" if rec.new_model.name else ""
        print(f"{rec.id}  {rec.create_time.ToDatetime():%Y-%m-%d %H:%M:%S}  {state_name(rec.state):9} "
              f"{rec.source_model.name} v{rec.source_model.version} {new:24} "
              f"{pb.Method.Name(rec.method).removeprefix('METHOD_').lower():26} forgot {len(rec.forget_record_ids)}")
    if resp.next_page_token:
        print("(more: raise --limit)")


def cmd_report(args) -> None:
    from praxon.unlearning.v1 import unlearning_pb2 as pb
    from services.common.client import resolve_target

    target = resolve_target(args.address, args.token, args.data_dir)
    resp = _stub(target).GetUnlearningReport(pb.GetUnlearningReportRequest(record_id=args.record_id),
                                             metadata=target.metadata)
    if args.out:
        Path(args.out).write_text(resp.report_json)
        print(f"wrote {args.out} (sha256 {resp.sha256})")
    else:
        print(resp.report_json)


def add_commands(sub, client_opts) -> None:
    sp = sub.add_parser("unlearn", help="certified unlearning: train | forget | audit | records | report")
    usub = sp.add_subparsers(dest="action", required=True)

    p = usub.add_parser("train", help="train a certified L2 head (default: on synthetic guard features)")
    client_opts(p)
    p.add_argument("--dataset", help="local dataset file (safetensors X, y, record ids) to upload")
    p.add_argument("--eval", help="local held-out dataset file to upload")
    p.add_argument("--dataset-artifact", help="an uploaded dataset artifact id")
    p.add_argument("--eval-artifact", help="an uploaded held-out dataset artifact id")
    p.add_argument("--kind", choices=KIND_NAMES, default="softmax_l2")
    p.add_argument("--name", default="guard-head")
    p.add_argument("--mu", type=float, default=0.01)
    p.add_argument("--r", type=float)
    p.add_argument("--epsilon", type=float)
    p.add_argument("--delta", type=float)
    p.add_argument("--capacity", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-wait", action="store_true")
    p.set_defaults(func=cmd_train)

    p = usub.add_parser("forget", help="forget records from a model version (leaves an immutable record)")
    client_opts(p)
    p.add_argument("--model", required=True, help="name, name:version or name@alias")
    p.add_argument("--ids", help="comma-separated record ids")
    p.add_argument("--ids-file", help="file with one record id per line")
    p.add_argument("--forget-set", help="an uploaded forget-set artifact id (JSON list of ids)")
    p.add_argument("--method", choices=METHOD_NAMES, default="certified_noisy_minimizer")
    p.add_argument("--epsilon", type=float)
    p.add_argument("--delta", type=float)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", help="model name of the new version (default: the source's)")
    p.add_argument("--eval-artifact", help="held-out dataset artifact: utility and MIA before/after")
    p.add_argument("--reason", help="why (e.g. a data-subject request number); kept in the record")
    p.add_argument("--divergence", choices=["total_variation", "kl", "reverse_kl", "jeffrey", "squared_hellinger",
                                            "pearson", "neyman", "jensen_shannon"],
                   help="causal LMs, method flat: the f-divergence (default total_variation)")
    p.add_argument("--lm-epochs", type=int, help="causal LMs: epochs over the forget set (default 5)")
    p.add_argument("--lm-lr", type=float, help="causal LMs: learning rate (default 1e-4 LoRA, 1e-5 full)")
    p.add_argument("--full", action="store_true", help="causal LMs: full fine-tuning instead of LoRA")
    p.add_argument("--no-wait", action="store_true")
    p.set_defaults(func=cmd_forget)

    p = usub.add_parser("audit", help="audit an unlearned version against retraining (empirical epsilon)")
    client_opts(p)
    p.add_argument("--record", help="unlearning record id (audits its new version; attached to the record)")
    p.add_argument("--model", help="or a certified model version: name, name:version or name@alias")
    p.add_argument("--runs", type=int, default=0, help="noise draws per side (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-wait", action="store_true")
    p.set_defaults(func=cmd_audit)

    p = usub.add_parser("records", help="list unlearning records, or show one")
    client_opts(p)
    p.add_argument("record_id", nargs="?")
    p.add_argument("--model", help="only records about this model name")
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=cmd_records)

    p = usub.add_parser("report", help="the auditors' JSON report of one record")
    client_opts(p)
    p.add_argument("record_id")
    p.add_argument("--out", help="write to this file instead of stdout")
    p.set_defaults(func=cmd_report)


# ---- the README demo step ------------------------------------------------------------------------------------
def demo(target: Target) -> None:
    """Train a certified guard head over (synthetic, unit-norm) features, forget 12 records, show the
    certificate, audit it against retraining, and show the new version's lineage in the registry."""
    from praxon.common.v1 import common_pb2
    from praxon.models.v1 import models_pb2, models_pb2_grpc
    from praxon.unlearning.v1 import unlearning_pb2 as pb
    from services.common.client import new_idempotency_key, upload

    stub = _stub(target)
    train, ev, ids = synthetic_guard_data()
    ds = upload(target, "guard-features-train.safetensors", train, DATASET_CONTENT_TYPE)
    evr = upload(target, "guard-features-eval.safetensors", ev, DATASET_CONTENT_TYPE)
    print(f"uploaded {len(ids)} guard-feature records (dataset {ds.id[:8]}..) and a held-out set")
    job = _finish(target, stub.StartTrainingJob(pb.StartTrainingJobRequest(
        dataset_artifact_id=ds.id, kind=pb.MODEL_KIND_SOFTMAX_L2, name="demo-guard-head", mu=0.05, epsilon=1.0,
        delta=1e-5, eval_dataset_artifact_id=evr.id, idempotency_key=new_idempotency_key()),
        metadata=target.metadata).job, True)
    trained = job.models[0]
    print(f"trained {trained.name} v{trained.version}: eval accuracy "
          f"{job.result['metrics']['eval_accuracy']:.3f}")
    forget = ids[:12]
    resp = stub.StartUnlearningJob(pb.StartUnlearningJobRequest(
        model=common_pb2.ModelRef(name=trained.name, version=trained.version), forget_record_ids=forget,
        method=pb.METHOD_CERTIFIED_NOISY_MINIMIZER, epsilon=1.0, delta=1e-5, eval_dataset_artifact_id=evr.id,
        reason="demo: data-subject deletion request #1", idempotency_key=new_idempotency_key()),
        metadata=target.metadata)
    print(f"forgetting {len(forget)} records ({', '.join(forget[:3])}, ...): record {resp.record_id}")
    _finish(target, resp.job, True)
    audit = stub.StartAuditJob(pb.StartAuditJobRequest(record_id=resp.record_id, runs=200,
                                                       idempotency_key=new_idempotency_key()),
                               metadata=target.metadata).job
    _finish(target, audit, True)
    rec = _get_record(target, resp.record_id)
    print_record(rec)
    registry = models_pb2_grpc.ModelRegistryServiceStub(target.channel())
    new = registry.GetModelVersion(models_pb2.GetModelVersionRequest(model=rec.new_model),
                                   metadata=target.metadata).version
    parent = registry.GetModelVersion(models_pb2.GetModelVersionRequest(model=rec.source_model),
                                      metadata=target.metadata).version
    print(f"registry: {new.name} v{new.version} parents={[p[:8] for p in new.parent_version_ids]} "
          f"(v{parent.version} is {parent.id[:8]}), excluded records: {len(new.config['excluded_record_ids'])}")
    report = stub.GetUnlearningReport(pb.GetUnlearningReportRequest(record_id=rec.id), metadata=target.metadata)
    print(f"auditors' report: {len(report.report_json)} bytes of JSON, sha256 {report.sha256[:16]}.. "
          f"(`praxon unlearn report {rec.id}`)")
