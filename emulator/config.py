"""Emulator settings: one pydantic model shared by `create_app` and the command line."""

from __future__ import annotations

import base64
import secrets
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

RenderMode = Literal["full", "fast"]


# Where `python -m emulator` reads its signing secret from when no --webhook-secret is given.
WEBHOOK_SECRET_ENV = "REELQUEUE_EMULATOR_WEBHOOK_SECRET"


def new_webhook_secret() -> str:
    """A Standard Webhooks secret: `whsec_` + base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


class EmulatorConfig(BaseModel):
    host: str = "127.0.0.1"
    port: int = 8900
    data_dir: Path = Path(".reelqueue/emulator")
    public_url: str | None = Field(default=None, description="base of output URLs; default http://HOST:PORT")
    job_seconds: float = Field(default=3.0, ge=0, description="time a job spends running")
    job_jitter: float = Field(default=0.0, ge=0, lt=1, description="job time drawn in job_seconds * [1-j, 1+j]")
    max_running: int = Field(default=50, ge=1, description="jobs running at once; the rest are throttled")
    price_per_second: float = Field(default=1.0, ge=0, description="credits per second of video")
    url_ttl_s: float = Field(default=3600.0, gt=0, description="lifetime of signed output URLs")
    # Per process by default, like a provider rotating signing keys: old URLs die with it.
    url_secret: str = Field(default_factory=lambda: secrets.token_hex(32), repr=False)
    webhook_secret: str = Field(default_factory=new_webhook_secret, repr=False)
    render_workers: int = Field(default=2, ge=1, description="renders running at once")
    render: RenderMode = Field(default="full", description="full: 24 fps at 1.5x proxy size; fast: tiny, 10 fps")
    render_cache_max: int = Field(default=256, ge=0, description="cached clips kept per data dir (0: no cache)")
    max_queued: int = Field(default=100, ge=1, description="waiting (queued + throttled) jobs before 429")
    hang_s: float = Field(default=300.0, description="how long a submit_hang fault holds the answer")
    fetch_timeout_s: float = 10.0
    max_image_bytes: int = 20 * 1024 * 1024
    webhook_attempts: int = Field(default=4, ge=1)

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    @property
    def db_path(self) -> Path:
        return self.data_dir / "jobs.sqlite3"

    def output_path(self, job_id: str) -> Path:
        return self.data_dir / "outputs" / f"{job_id}.mp4"

    def work_dir(self, job_id: str) -> Path:
        return self.data_dir / "work" / job_id

    @property
    def cache_dir(self) -> Path:
        return self.data_dir / "cache"
