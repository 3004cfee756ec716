"""Helpers for the provider contract tests: fixtures, an adapter on the emulator's dialect in-process."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from adapters.providers.emulator_api import ErrorOut, JobOut, OutputOut, UsageOut
from adapters.providers.http import HttpProvider, ProviderConfig
from emulator.app import create_app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "providers"


def load(provider: str, name: str) -> Any:
    return json.loads((FIXTURES / provider / name).read_text())


def hosted(cls: type[HttpProvider], key: str, *, client: TestClient | None = None, **config: Any) -> HttpProvider:
    """An adapter; with `client`, speaking to the emulator app behind it (the dialect's prefix)."""
    base = f"http://testserver/{cls.emulator_prefix}"
    provider = cls(ProviderConfig(name=cls.name, api_key=key, base_url=base, **config))
    if client is not None:
        provider._client = TestClient(client.app, base_url=base, headers=provider._auth_headers())
    return provider


def answering(cls: type[HttpProvider], key: str, handler: Callable[[httpx.Request], httpx.Response],
              **config: Any) -> HttpProvider:
    """An adapter whose every call `handler` answers (documented responses, transport errors)."""
    provider = hosted(cls, key, **config)
    provider._client = httpx.Client(base_url=f"http://{cls.name}.test", transport=httpx.MockTransport(handler),
                                    headers=provider._auth_headers())
    return provider


@contextmanager
def dialect_client(tmp_path: Path, prefix: str) -> Iterator[TestClient]:
    """The emulator app (no background threads: jobs stay queued unless a test moves them)."""
    app = create_app(data_dir=tmp_path / "emulator", port=8999, webhook_secret="whsec_" + "A" * 43 + "=")
    yield TestClient(app)


def faults(client: TestClient, **values: Any) -> None:
    client.post("/_sim/faults", json=values).raise_for_status()


def engine_job(status: str, *, error_code: str | None = None) -> JobOut:
    """An engine job in `status`, as the dialects render it."""
    now = datetime(2024, 11, 6, 12, tzinfo=UTC)
    job = JobOut(id="job_1", request_key="x:1", model="m", aspect_ratio="16:9", duration_s=5, status=status,
                 progress=0.4 if status == "running" else 0.0, created_at=now, updated_at=now)
    if status == "succeeded":
        job.output = [OutputOut(url="http://emulator.test/files/job_1/t.mp4", expires_at=now)]
        job.usage = UsageOut(seconds=5, cost=5)
    if status == "failed":
        job.error = ErrorOut(code=error_code or "INTERNAL.SIMULATED_FAILURE", message="failed")
    return job
