"""Sequential recommendation: PreferDiff (diffusion recommender with a preference loss) and its baselines.

api.py (the servicer), params.py (the jobs' parameter models), data.py (interactions -> Dataset artifact, split
protocols), model.py (PreferDiff, DreamRec, SASRec-CE, GRU4Rec), metrics.py, training.py (the epoch steps), jobs.py
(import, training, sweep), recommender.py (the engine: servicer, predictor and benchmarks score with it), serving.py
(cache, batching), predictor.py (kserve), cli.py."""
from services.common.spec import DemoStep, JobKind, ServiceSpec

SPEC = ServiceSpec(
    name="recommendation",
    servicers="services.recommendation.api:register",
    job_kinds={
        "recommendation.import": JobKind("default", "services.recommendation.jobs:run_import",
                                         params="services.recommendation.params:ImportParams"),
        "recommendation.train": JobKind("training", "services.recommendation.jobs:run_training",
                                        params="services.recommendation.params:TrainParams"),
        "recommendation.sweep": JobKind("training", "services.recommendation.jobs:run_sweep",
                                        params="services.recommendation.params:SweepParams"),
    },
    predictors={"recommendation": "services.recommendation.predictor:build"},
    cli="services.recommendation.cli",
    demo=DemoStep("recommendation: import MovieLens-100k (leave-one-out), train SASRec-CE beside popularity, "
                  "recommend for a new history",
                  "services.recommendation.cli:demo"),
    settings="services.recommendation.settings:ServingConfig",
)
