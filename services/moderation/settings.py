"""The moderation service's settings section (`Settings.moderation`): light, so the CLI and the catalog can import it."""
from __future__ import annotations

from pydantic import Field, SecretStr

from services.common import settings


class ServingConfig(settings.ServingConfig):
    """Knobs of the moderation service (settings.moderation, from PRAXON_MODERATION__<FIELD>); the shared ones
    (default_alias, alias_check_s, load_wait_s, retry_after_s, max_models, max_batch, max_wait_ms) are
    services.common.serving.ServingConfig's, with its defaults."""

    default_guard: str = "guard"
    default_scorer: str = "policy-scorer"
    batch_workers: int = 0            # batches run at once; 0 = 2 * cores / torch threads
    max_text_bytes: int = 1 << 20     # hard cap on one text's UTF-8 size, checked before any other work
    max_batch_items: int = 256        # ModerateBatch items
    thresholds_ttl_s: float = 1.0     # thresholds cache per process (a change through another replica: <= ttl)
    # Bias certification jobs call the generation service here ("" = this platform's own gRPC address,
    # settings.grpc host:port). They call as the job's tenant with a short-lived API token minted for the job
    # (revoked when the run ends) unless generation_token is set (a token of the same tenant, e.g. on a remote
    # platform).
    generation_address: str = ""
    generation_token: SecretStr | None = None
    generation_timeout_s: float = Field(600.0, gt=0)   # one Generate call
