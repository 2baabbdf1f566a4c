"""Long jobs of the moderation service, one file per job kind, written against services.common.jobcontext.JobContext
(parameters: services/moderation/params.py, validated here from ctx.params with the servicer's model). The guard,
calibration and distillation jobs are Steps under run_steps, which owns their resume, cancellation, checkpoints and
progress; the policy scorer trains in one go (nothing to resume):

train_guard.py          moderation.train_guard          the guard ("frozen_linear" / "finetune"), decision defaults
train_policy_scorer.py  moderation.train_policy_scorer  the SafeWatch-style rule scorer
calibrate.py            moderation.calibrate            Conformal Fairness severity sets (kind "guard.conformal")
distill.py              moderation.distill              HarmAug student (kind "guard.student")
data.py                 the datasets they read (artifact or packaged seed set) and their train/validation split

Results never carry a registry version number: it is assigned when the job commits (the Job's models list has it)."""
