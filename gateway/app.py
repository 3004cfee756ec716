"""The HTTP gateway (FastAPI): health, provider webhooks (gateway/webhooks.py), media behind
signed links (gateway/media.py), the review gallery (gateway/review.py) and /metrics.

`create_app` is a small factory: tests hand it their dependencies; `app`, which uvicorn serves
(`reelqueue dev up`, docker-compose), builds them from Settings on the first request that needs them.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from gateway.deps import GatewayDeps, LazyDeps, deps_from_settings
from gateway.media import router as media_router
from gateway.problems import install_problem_handlers
from gateway.review import ReviewDeps, review_deps_from_settings
from gateway.review import router as review_router
from gateway.webhooks import router as webhooks_router


def _from_settings() -> GatewayDeps:
    from config.settings import Settings

    return deps_from_settings(Settings())


def create_app(deps: GatewayDeps | Callable[[], GatewayDeps] | None = None,
               review_deps: Callable[[], ReviewDeps] | None = None) -> FastAPI:
    """An app over `deps` (or a factory of them; default: from Settings, built on first use)."""
    application = FastAPI(title="reelqueue gateway")
    application.state.review_factory = review_deps or review_deps_from_settings
    application.state.review_deps = None
    if isinstance(deps, GatewayDeps):
        given = deps
        application.state.deps = LazyDeps(lambda: given)
    else:
        application.state.deps = LazyDeps(deps or _from_settings)
    install_problem_handlers(application)
    application.include_router(webhooks_router)
    application.include_router(media_router)
    application.include_router(review_router)

    @application.get("/healthz")
    def healthz() -> dict[str, bool]:
        """Liveness for `reelqueue dev up` and load balancers: answers without touching the DB."""
        return {"ok": True}

    @application.get("/metrics")
    def metrics() -> Response:
        """Prometheus text: this process's counters plus the Postgres gauges (one query per scrape)."""
        body = generate_latest(REGISTRY) + generate_latest(_database_registry(application))
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return application


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


app = create_app()
