"""Sequential recommendation: PreferDiff (diffusion recommender with a preference loss) and its baselines.

Domain code only (no grpc): data.py (interactions -> Dataset artifact), model.py (PreferDiff, DreamRec, SASRec-CE,
popularity), metrics.py, training.py, jobs.py (run_import, run_training, load_recommender)."""
