"""The HTTP gateway (FastAPI). Routers for the API and provider webhooks are added here."""

from __future__ import annotations

from fastapi import FastAPI


def create_app() -> FastAPI:
    """A factory so tests can build an app; `app` below is what uvicorn serves."""
    application = FastAPI(title="reelqueue gateway")

    @application.get("/healthz")
    def healthz() -> dict[str, bool]:
        """Liveness for `reelqueue dev up` and load balancers: answers without touching the DB."""
        return {"ok": True}

    return application


app = create_app()
