"""Moderation: the guard model (BingoGuard-style topics + severity), tenant decisions, SafeWatch-style custom
policies, streaming checks, conformal calibration, HarmAug distillation, and LLMCert-B bias certificates of the
generation service's language models.

api.py (the servicer: proto <-> domain), engine.py (ModerationEngine: the one serving path of the servicer, the kserve
predictor (predictor.py) and the benchmarks), guard.py / distill.py (the teacher guard and the distilled student, both
served by alias), gemma_guard.py (kind "gemma_frozen": the guard's heads over a frozen language model that reads
the request and the reply in one pass), gemma_lora.py (kind "gemma_lora": the same with LoRA-tuned layers),
decision.py / policies.py / stream.py / conformal.py / bias_cert.py
(domain code; no grpc),
bias_store.py (the immutable bias certificates), params.py (typed job parameters), jobs/ (one file per job kind),
cli.py (`praxon moderate ...`)."""
from services.common.spec import DemoStep, JobKind, ServiceSpec

SPEC = ServiceSpec(
    name="moderation",
    servicers="services.moderation.api:register",
    job_kinds={
        "moderation.train_guard": JobKind("training", "services.moderation.jobs.train_guard:run_guard_training",
                                          params="services.moderation.params:GuardTrainParams"),
        "moderation.train_policy_scorer": JobKind(
            "training", "services.moderation.jobs.train_policy_scorer:run_policy_scorer_training",
            params="services.moderation.params:PolicyScorerTrainParams"),
        "moderation.calibrate": JobKind("calibration", "services.moderation.jobs.calibrate:run_calibration",
                                        params="services.moderation.params:CalibrationParams"),
        "moderation.distill": JobKind("distillation", "services.moderation.jobs.distill:run_distillation",
                                      params="services.moderation.params:DistillParams"),
        # waits on the generation service's gRPC API most of the time: the light calibration queue
        "moderation.certify_bias": JobKind("calibration", "services.moderation.jobs.certify_bias:run_bias_certification",
                                           params="services.moderation.params:BiasCertParams",
                                           on_finish="services.moderation.bias_store:certificate_finished"),
    },
    predictors={"moderation": "services.moderation.predictor:build"},
    cli="services.moderation.cli",
    demo=DemoStep("moderation: train the guard on the seed set, promote it, moderate texts with per-topic severities",
                  "services.moderation.cli:demo"),
    settings="services.moderation.settings:ServingConfig",
    model_adapters={"guard_frozen_linear": "services.moderation.heads:ADAPTER"},
    migrations="services.moderation",
)
