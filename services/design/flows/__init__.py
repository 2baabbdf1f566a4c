"""Guided flow sampling (issue 17): flows as registered models, rewards as differentiable functions, OC-Flow
(Euclidean and SO(3)) with D-Flow and FlowGrad as its named special cases, and energy-weighted flow matching.

geometry.py (SO(3) maps), mixture.py (analytic Gaussian mixtures: density, marginal CondOT velocity, tilted
targets), models.py (velocity fields and their registry form), training.py (CFM / EFM / SO(3) CFM losses and data),
rewards.py (reward terms), guidance.py (the samplers and OC-Flow), params.py, jobs.py, api.py (the servicer),
cli.py. Nothing here but api.py imports grpc."""
