"""Scientific design: GameOpt campaigns for combinatorial sequence design (gameopt/), SymmCD crystal generation with
symmetry by construction (crystals/), and guided flow sampling by optimal control with energy-weighted flow
matching (flows/). Each part has api.py (its servicer), its algorithm modules (no grpc), jobs.py and cli.py; the
files at this level only put the parts together into one service."""
from services.common.spec import DemoStep, JobKind, ServiceSpec

SPEC = ServiceSpec(
    name="design",
    servicers="services.design.api:register",
    job_kinds={
        # gameopt
        # (a suggestion that succeeded records its oracle's scores as the campaign's observations)
        "design.gameopt.suggest": JobKind("training", "services.design.gameopt.jobs:run_suggestion",
                                          params="services.design.gameopt.params:SuggestParams",
                                          on_finish="services.design.gameopt.hooks:suggestion_finished"),
        # crystals
        "design.crystals.import": JobKind("default", "services.design.crystals.jobs:run_import",
                                          params="services.design.crystals.params:ImportParams"),
        "design.crystals.train": JobKind("training", "services.design.crystals.jobs:run_training",
                                         params="services.design.crystals.params:TrainParams"),
        "design.crystals.generate": JobKind("default", "services.design.crystals.jobs:run_generation",
                                            params="services.design.crystals.params:GenerateParams"),
        # flows
        "design.flows.train": JobKind("training", "services.design.flows.jobs:run_train_flow",
                                      params="services.design.flows.params:TrainFlowParams"),
        "design.flows.train_predictor": JobKind("training", "services.design.flows.jobs:run_train_predictor",
                                                params="services.design.flows.params:TrainPredictorParams"),
        "design.flows.sample": JobKind("default", "services.design.flows.jobs:run_sampling",
                                       params="services.design.flows.params:SampleParams"),
    },
    cli="services.design.cli",
    demo=DemoStep("design: an oracle GameOpt campaign, crystals with the space group asked for, guided flow sampling",
                  "services.design.cli:demo"),
    migrations="services.design",
)

# The parts, in demo order; each is a subpackage services.design.<part> with api.register, cli.add_commands and
# cli.demo. A part is listed here once it exists.
PARTS: tuple[str, ...] = ("gameopt", "crystals", "flows")

__all__ = ["SPEC", "PARTS", "JobKind"]
