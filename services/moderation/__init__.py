"""Moderation: the guard model (BingoGuard-style topics + severity), tenant decisions, SafeWatch-style custom
policies, streaming checks, conformal calibration and HarmAug distillation.

api.py (the servicer), guard.py / decision.py / policies.py / stream.py / conformal.py / distill.py (domain code; no
grpc), jobs.py (training, calibration, distillation), predictor.py (kserve), cli.py (`praxon moderate ...`)."""
from services.common.spec import DemoStep, JobKind, ServiceSpec

SPEC = ServiceSpec(
    name="moderation",
    servicers="services.moderation.api:register",
    job_kinds={
        "moderation.train_guard": JobKind("training", "services.moderation.jobs:run_guard_training"),
        "moderation.train_policy_scorer": JobKind("training", "services.moderation.jobs:run_policy_scorer_training"),
        "moderation.calibrate": JobKind("calibration", "services.moderation.jobs:run_calibration"),
        "moderation.distill": JobKind("distillation", "services.moderation.jobs:run_distillation"),
    },
    predictors={"moderation": "services.moderation.predictor:build"},
    cli="services.moderation.cli",
    demo=DemoStep("moderation: train the guard on the seed set, promote it, moderate texts with per-topic severities",
                  "services.moderation.cli:demo"),
    settings="services.moderation.settings:ServingConfig",
)
