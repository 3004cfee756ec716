"""The HTTP gateway (FastAPI): health, provider webhooks (gateway/webhooks.py), media behind
signed links (gateway/media.py), the review gallery (gateway/review.py), the tenant API under /v1
(gateway/v1/), the tenant studio page at /app (gateway/studio.py) and /metrics.

`create_app` is a small factory: tests hand it their dependencies; `app`, which uvicorn serves
(`python -m gateway`: `reelqueue dev up`, docker-compose), builds them from Settings on the first
request that needs them, and refuses to start without its secrets (config/secrets.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from starlette.types import Scope

from config.settings import Settings
from gateway.deps import GatewayDeps, LazyDeps, deps_from_settings
from gateway.guards import BodyLimit, check_metrics_access, install_log_redaction
from gateway.health import router as health_router
from gateway.media import router as media_router
from gateway.overview import router as overview_router
from gateway.problems import install_problem_handlers
from gateway.request_ids import RequestIds, install_request_log
from gateway.review import ReviewDeps, review_deps_from_settings
from gateway.review import router as review_router
from gateway.studio import router as studio_router
from gateway.v1 import router as v1_router
from gateway.webhooks import router as webhooks_router
from telemetry.tracing import instrument_app

MAX_BODY_BYTES = 1024 * 1024  # no route takes more (webhooks have their own, smaller cap)


def _from_settings() -> GatewayDeps:
    return deps_from_settings(Settings())


@asynccontextmanager
async def _secrets_checked(_: FastAPI) -> AsyncIterator[None]:
    """Served as `uvicorn gateway.app:app`: no start without the secrets (`python -m gateway` exits 2)."""
    from config.secrets import problems

    found = problems(Settings(), "gateway")
    if found:
        raise RuntimeError("refusing to start: " + "; ".join(found))
    yield


def create_app(deps: GatewayDeps | Callable[[], GatewayDeps] | None = None,
               review_deps: Callable[[], ReviewDeps] | None = None, *, settings: Settings | None = None,
               require_secrets: bool = False) -> FastAPI:
    """An app over `deps` (or a factory of them; default: from Settings, built on first use).
    `settings` (default: from the environment) decide the docs pages, the /metrics token, the body cap."""
    settings = settings or Settings()
    install_log_redaction()
    install_request_log()
    docs = settings.api_docs
    application = FastAPI(title="reelqueue gateway", docs_url="/docs" if docs else None,
                          redoc_url="/redoc" if docs else None,
                          lifespan=_secrets_checked if require_secrets else None)
    application.add_middleware(BodyLimit, max_bytes=max(MAX_BODY_BYTES, settings.webhook_max_body_bytes),
                               lower_cap=lambda scope: _api_cap(application, scope))
    application.add_middleware(RequestIds)  # added last: outermost, so even a 413 carries the id
    application.state.review_factory = review_deps or review_deps_from_settings
    application.state.review_deps = None
    if isinstance(deps, GatewayDeps):
        given = deps
        application.state.deps = LazyDeps(lambda: given)
    else:
        application.state.deps = LazyDeps(deps or _from_settings)
    install_problem_handlers(application)
    instrument_app(application)
    application.include_router(webhooks_router)
    application.include_router(media_router)
    application.include_router(review_router)
    application.include_router(overview_router)
    application.include_router(studio_router)
    application.include_router(v1_router)
    application.include_router(health_router)

    @application.get("/healthz")
    def healthz() -> dict[str, bool]:
        """Liveness for `reelqueue dev up` and load balancers: answers without touching the DB
        (readiness, which does: /readyz, gateway/health.py)."""
        return {"ok": True}

    @application.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        """Prometheus text: this process's counters plus the Postgres gauges (one query per scrape);
        behind REELQUEUE_METRICS_TOKEN, or for loopback clients only when there is none."""
        check_metrics_access(request, settings.metrics_token)
        body = generate_latest(REGISTRY) + generate_latest(_database_registry(application))
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return application


def _api_cap(application: FastAPI, scope: Scope) -> int | None:
    """The tenant API's body cap for a request under /v1 (JSON only: files go straight to S3)."""
    if scope["path"] == "/v1" or scope["path"].startswith("/v1/"):
        return application.state.deps.get().api.max_body_bytes
    return None


def _database_registry(application: FastAPI) -> CollectorRegistry:
    """Built on the first scrape (the dependencies connect lazily), then reused."""
    registry = getattr(application.state, "database_metrics", None)
    if registry is None:
        from metrics.collector import PostgresCollector

        deps = application.state.deps.get()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(PostgresCollector(deps.db, deps.provider_limits, sorted(deps.providers)))
        application.state.database_metrics = registry
    return registry


app = create_app(require_secrets=True)
