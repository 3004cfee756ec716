"""The emulator's HTTP API (see README.md): the parts it runs on (the sqlite store, the job clock,
the render threads, the webhook sender) and the routers over them (emulator/routes/, and one per
provider dialect in emulator/dialects/)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from emulator.clock import JobClock
from emulator.config import EmulatorConfig
from emulator.dialects import DIALECTS
from emulator.engine import Engine
from emulator.errors import install_error_handlers
from emulator.faults import FaultBoard
from emulator.routes.files import files_router
from emulator.routes.jobs import jobs_router
from emulator.routes.sim import sim_router
from emulator.service import JobService
from emulator.stats import StatsBoard
from emulator.store import JobStore
from emulator.webhooks import WebhookSender
from emulator.worker import RenderPool


def create_app(config: EmulatorConfig | None = None, **params: Any) -> FastAPI:
    """Build the app from a config, or from EmulatorConfig fields given as keywords."""
    config = config or EmulatorConfig(**params)
    store = JobStore(config.db_path)
    stats = StatsBoard()
    faults = FaultBoard(DIALECTS)
    webhooks = WebhookSender(config.webhook_secret, attempts=config.webhook_attempts, stats=stats, faults=faults)
    service = JobService(config, store, webhooks, DIALECTS)
    pool = RenderPool(store, config, stats, on_rendered=lambda: clock.wake())
    clock = JobClock(service, config, faults, stats, on_started=pool.wake)
    engine = Engine(config, store, service, faults, clock, stats)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        webhooks.start()
        pool.start()
        clock.start()
        yield
        await asyncio.to_thread(clock.stop)
        await asyncio.to_thread(pool.stop)
        await asyncio.to_thread(webhooks.stop)
        store.close()

    app = FastAPI(title="reelqueue provider emulator", lifespan=lifespan)
    app.state.config = config
    install_error_handlers(app)
    app.include_router(jobs_router(engine, service, store, other_keys=[f"{p}:" for p in DIALECTS]))
    for dialect in DIALECTS.values():
        app.include_router(dialect.router(engine))
    app.include_router(files_router(config))
    app.include_router(sim_router(service, store, stats, faults, clock))

    @app.get("/healthz")
    def healthz() -> dict[str, bool]:
        return {"ok": True}

    return app
