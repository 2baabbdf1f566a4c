"""Measurement scripts (see each folder's RESULTS.md). A regular package, so that `benchmarks.*` resolves here
and not to the top-level `benchmarks` package opacus 1.6 installs into site-packages."""
