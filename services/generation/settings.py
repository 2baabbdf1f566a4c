"""The generation service's settings section (`Settings.generation`, PRAXON_GENERATION__<FIELD>): light, so the
CLI and the catalog can import it."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from services.common import settings


class RemoteModel(BaseModel):
    """A model served by an outside OpenAI-compatible server (vLLM, KServe's Hugging Face runtime, TGI, praxon's
    own `praxon predictor generation`): Generate / GenerateStream for this name are forwarded to it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(pattern=r"^https?://")   # up to and including /v1, e.g. http://vllm:8000/v1
    model: str = ""                  # the upstream's model name ("" = the name it is configured under here)
    api_key_env: str = ""            # environment variable holding the API key (read at startup), "" = none
    timeout_s: float = Field(120.0, gt=0)


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
    # Model names served by a remote OpenAI-compatible server instead of the local engine (services.generation.remote),
    # e.g. PRAXON_GENERATION__REMOTE_MODELS='{"big": {"base_url": "http://vllm:8000/v1", "model": "Qwen/Qwen2.5-7B"}}'
    remote_models: dict[str, RemoteModel] = {}
