"""Sequential recommendation: PreferDiff (diffusion recommender with a preference loss) and its baselines.

api.py (the servicer), data.py (interactions -> Dataset artifact), model.py (PreferDiff, DreamRec, SASRec-CE,
popularity), metrics.py, training.py, jobs.py (import, training), serving.py, predictor.py (kserve), cli.py."""
from services.common.spec import DemoStep, JobKind, ServiceSpec

SPEC = ServiceSpec(
    name="recommendation",
    servicers="services.recommendation.api:register",
    job_kinds={
        "recommendation.import": JobKind("default", "services.recommendation.jobs:run_import"),
        "recommendation.train": JobKind("training", "services.recommendation.jobs:run_training"),
    },
    predictors={"recommendation": "services.recommendation.predictor:build"},
    cli="services.recommendation.cli",
    demo=DemoStep("recommendation: import MovieLens-100k, train PreferDiff (demo-sized), recommend for a new history",
                  "services.recommendation.cli:demo"),
    settings="services.recommendation.settings:ServingConfig",
)
