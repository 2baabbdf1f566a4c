"""Machine unlearning: certified (strongly convex models, noisy minimizer approximation), robust
(out-of-distribution forget sets), approximate (any torch module, uncertified) and audits.

api.py (the servicer), records.py (immutable unlearning records), certified.py / robust.py / approximate.py /
audit.py (the algorithms; no grpc), jobs.py (train, unlearn, audit), cli.py (`praxon unlearn ...`).
Causal language models (Hugging Face versions): unlearning.train kind causal_lm_qa fine-tunes one on QA records, and
unlearning.unlearn forgets QA records with FLAT, NPO or gradient ascent, LoRA or full (flat.py: losses and loop;
llm_jobs.py: the job branches; llm_eval.py: TOFU-style metrics; authors.py: the fictitious-authors data)."""
from services.common.spec import DemoStep, JobKind, ServiceSpec

SPEC = ServiceSpec(
    name="unlearning",
    servicers="services.unlearning.api:register",
    job_kinds={
        "unlearning.train": JobKind("training", "services.unlearning.jobs:run_training",
                                    params="services.unlearning.params:TrainParams"),
        # each unlearn and audit job, once ended, writes its record's outcome / audit (written once, immutable)
        "unlearning.unlearn": JobKind("unlearning", "services.unlearning.jobs:run_unlearning",
                                      params="services.unlearning.params:UnlearnParams",
                                      on_finish="services.unlearning.hooks:unlearning_finished"),
        "unlearning.audit": JobKind("audit", "services.unlearning.jobs:run_audit",
                                    params="services.unlearning.params:AuditParams",
                                    on_finish="services.unlearning.hooks:audit_finished"),
    },
    cli="services.unlearning.cli",
    demo=DemoStep("unlearning: train a certified guard head, forget records, audit the certificate, show the lineage",
                  "services.unlearning.cli:demo"),
    migrations="services.unlearning",
)
