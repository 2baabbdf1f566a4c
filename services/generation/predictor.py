"""`praxon predictor generation --tenant T --model lm@production`: a registered language model served with kserve's
ModelServer, speaking the OpenAI API that kserve exposes for generative models (services.generation.openai_api:
/openai/v1/completions, /openai/v1/chat/completions, /openai/v1/models, and the same under /v1), without vllm.

One process: kserve's ModelServer (its health, readiness and metrics endpoints, which the chart's probes use) with
the OpenAI routes added to its FastAPI app when the model starts. The engine is the service's own
(services.generation.api.build_loaded -> services.generation.engine.Engine), loaded from the registry through the
same ModelCache as the gRPC servicer, so a reference without a version follows its alias (hot swap) the same way.

kserve's GET /v1/models (its v1 protocol's model list) is answered by the OpenAI model list instead: an OpenAI
client with base_url .../v1 needs that path. The v1/v2 predict endpoints answer with a pointer to the OpenAI ones.

Every error outside /v2/ (the Open Inference Protocol's paths, whose clients read OIP's {"error": "<string>"}) has
OpenAI's body, including the bearer-token check's 401 (services.common.oip.BearerAuthMiddleware answers OIP's shape
for every predictor) and an unknown route's 404: openai_api.OpenAIErrorBodies, the outermost middleware of the app,
rewrites them, so the `openai` client shows the server's message ("Error code: 401 - invalid or revoked API
token ...") instead of only the status."""
from __future__ import annotations

from typing import Any

from kserve import Model
from kserve.errors import InvalidInput

from services.generation.openai_api import OpenAIErrorBodies, OpenAIService, router


class GenerationPredictor(Model):
    """A kserve model whose API is OpenAI's completions and chat completions (see the module docstring)."""

    def __init__(self, name: str, service: OpenAIService):
        super().__init__(name)
        self.service = service
        self.ready = True
        self._routes_added = False
        self._errors_added = False

    def load(self) -> bool:
        self.ready = True
        return self.ready

    def add_routes(self, app) -> None:
        """Mount the OpenAI routes on a FastAPI app (once), ahead of the app's own routes."""
        if self._routes_added:
            return
        app.include_router(router(self.service))
        self._routes_added = True

    def start(self) -> None:
        """Called by ModelServer.start() before it builds its REST app: add the OpenAI routes to that app (kserve's
        module-level FastAPI app, where kserve registers its own OpenAI routes when vllm is there)."""
        from kserve.model_server import app

        self.add_routes(app)
        if not self._errors_added:
            # added after predictor_server()'s BearerAuthMiddleware, so outside it (Starlette puts the last added
            # middleware outermost): its 401 passes through here
            app.add_middleware(OpenAIErrorBodies)
            self._errors_added = True
        self.ready = True

    async def predict(self, payload: Any, headers: dict[str, str] | None = None,
                      response_headers: dict[str, str] | None = None):
        raise InvalidInput("this model speaks the OpenAI API: POST /openai/v1/completions or "
                           "/openai/v1/chat/completions")


def build(settings, tenant_id: str, model_ref: str) -> GenerationPredictor:
    """PREDICTORS["generation"]: the predictor for a registered language model ("name", "name:3" or "name@alias";
    neither: the default alias "production", else the latest version), loaded now; a reference without a version
    keeps following its alias. Requests may name the model by its registry name, by the reference as given, or
    as "generation"."""
    from services.common import db
    from services.common.registry import Registry
    from services.common.serving import ModelCache, RefKey, parse_model_ref
    from services.common.spec import service_settings
    from services.common.store import ArtifactStore
    from services.generation.api import build_loaded
    from services.generation.settings import GenerationConfig

    config = service_settings(settings, "generation", GenerationConfig)
    name, version, alias = parse_model_ref(model_ref, config.default_model)
    key = RefKey(tenant_id, name, version, alias)
    pool = db.create_pool(settings, max_size=2)
    cache = ModelCache(Registry(pool, ArtifactStore(settings)), build_loaded(config), config, what="language model")
    first = cache.warm(key)  # ready before the server starts (kserve refuses models that are not)

    async def fixed():
        return first

    async def following():
        return await cache.get(key)

    service = OpenAIService(fixed if version else following, [name, model_ref, "generation"], config)
    predictor = GenerationPredictor("generation", service)
    predictor.pool = pool  # kept open for the predictor's lifetime (alias checks, new versions)
    return predictor
