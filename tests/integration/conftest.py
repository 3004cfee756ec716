"""The real embedded stack for integration tests: started once per session, on free ports.

Postgres, S3, Temporal and the provider emulator run as real processes under a temporary
REELQUEUE_HOME; each test runs its own in-process worker on a unique task queue (as in the
Temporal samples), except the crash test, which kills a real worker process.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from adapters.storage import ObjectStorage
from config.settings import Settings

STACK_SERVICES = ["postgres", "s3", "temporal", "emulator", "gateway"]


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    import devstack
    from schema.migrate import upgrade

    for key in list(os.environ):
        if key.startswith("REELQUEUE_") or key == "DATABASE_URL":
            del os.environ[key]
    home = tmp_path_factory.mktemp("reelqueue-home")
    os.environ["REELQUEUE_HOME"] = str(home)
    os.environ["REELQUEUE_EMULATOR_RENDER"] = "fast"  # small valid clips: hundreds of tasks stay quick
    # Hosted providers on the emulator's dialects: the gateway verifies their webhooks too.
    devstack.up(Settings(), services=STACK_SERVICES, emulate_providers=True)
    settings = Settings()
    try:
        upgrade(settings.database_url)
        ObjectStorage.from_settings(settings).ensure_bucket()
        yield settings
        _ledger_holds_after_the_suite(settings)
    finally:
        devstack.down(settings)


def _ledger_holds_after_the_suite(settings: Settings) -> None:
    """Whatever the tests did, every task the suite left behind passes `reelqueue ledger check`."""
    import asyncio
    import concurrent.futures

    from control.ledger_audit import audit_ledger

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # the session's own loop may be running
        report = pool.submit(asyncio.run, audit_ledger(settings)).result()
    if not report.ok:
        pytest.fail("ledger check after the integration suite:\n" + "\n".join(
            f"{v.task_id} {v.status} {v.rule}: {v.detail}" for v in report.violations))


@pytest.fixture(scope="session")
async def client(stack: Settings):
    from adapters.temporal_client import connect

    return await connect(stack)


@pytest.fixture
async def task_queue(stack: Settings, client) -> AsyncIterator[str]:
    """A worker for this test only, on its own task queue."""
    from stack_helpers import serving

    queue = f"test-{uuid.uuid4().hex[:12]}"
    async with serving(client, stack, queue):
        yield queue


@pytest.fixture
def emulator_jobs(stack: Settings):
    """Every job the emulator ever created (its test hook)."""

    def read() -> list[dict]:
        return httpx.get(f"{stack.emulator_url}/_sim/jobs", timeout=10).json()["jobs"]

    return read
