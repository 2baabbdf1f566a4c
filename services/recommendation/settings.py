"""The recommendation service's settings section (`Settings.recommendation`): light, so the CLI and the catalog can import it."""
from __future__ import annotations

from services.common import settings


class ServingConfig(settings.ServingConfig):
    """Knobs of the recommendation service (settings.recommendation, from PRAXON_RECOMMENDATION__<FIELD>); the shared
    ones are services.common.serving.ServingConfig's, some with other defaults here."""

    default_model: str = "recommender"
    load_wait_s: float = 30.0          # a request waits this long for a loading model, then gets UNAVAILABLE
    max_models: int = 4                # loaded model versions kept (LRU)
    max_batch: int = 64                # dynamic batching: at most this many histories per forward
    max_k: int = 1000                  # largest k served (also bounded by the catalogue size)
    max_history_items: int = 1000      # items in one history; the model reads only the most recent max_history
    max_batch_histories: int = 1024    # histories in one RecommendBatch
