"""Machine unlearning: certified (strongly convex models, noisy minimizer approximation), robust
(out-of-distribution forget sets), approximate (any torch module, uncertified) and audits.

Domain code only: no grpc import. The long jobs live in `services.unlearning.jobs`."""
