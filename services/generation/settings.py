"""The generation service's settings section (`Settings.generation`, PRAXON_GENERATION__<FIELD>): light, so the
CLI and the catalog can import it."""
from __future__ import annotations

from services.common import settings


class GenerationConfig(settings.ServingConfig):
    """Knobs of the generation service; the shared serving ones are services.common.settings.ServingConfig's."""

    default_model: str = "tiny-llama"
    load_wait_s: float = 30.0
    max_models: int = 2
    max_running: int = 32            # sequences decoded together (iteration-level batching)
    max_queued: int = 64             # waiting requests beyond the running ones; more -> RESOURCE_EXHAUSTED
    max_new_tokens: int = 1024       # largest max_new_tokens accepted
    max_prompt_chars: int = 200_000
    max_stop: int = 8                # stop strings per request
    max_top_logprobs: int = 20
    # Local folders a StartImportLanguageModelJob may read model directories from (empty: uploads only). A path
    # outside them is refused, so a tenant cannot make the worker read arbitrary files.
    import_roots: list[str] = []
