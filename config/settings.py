"""One settings object for every process (CLI, worker, gateway, emulator).

Precedence: environment variables (prefix ``REELQUEUE_``; ``DATABASE_URL`` too), then secrets from
files (``REELQUEUE_<FIELD>_FILE`` or ``REELQUEUE_SECRETS_DIR``, config/secrets.py), then what
``reelqueue dev up`` wrote to ``$REELQUEUE_HOME/stack.json``, then the defaults below. No secret has
a usable default: `dev up` generates them, the gateway and worker refuse to start without them.
docker-compose.yml sets the same variable names (a test checks that).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from config.defaults import DEFAULT_TASK_QUEUE, AdmissionLayers, BreakerPolicy, ProviderLimits
from config.secrets import SecretFilesSource

STACK_FILE = "stack.json"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="REELQUEUE_", extra="ignore", populate_by_name=True)

    home: Path = Field(default=Path(".reelqueue"), description="pids, logs, data of the embedded stack")
    database_url: str = Field(
        default="postgresql+psycopg://reelqueue@127.0.0.1:5432/reelqueue",
        validation_alias=AliasChoices("DATABASE_URL", "REELQUEUE_DATABASE_URL"),
    )
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    # Read the temporalio.envconfig profile (TOML file, TEMPORAL_* variables: TLS, mTLS, API key;
    # docs/deploy.md); `dev up` turns it off for its own plain-gRPC dev server in stack.json.
    temporal_envconfig: bool = True
    temporal_ui_url: str = "http://127.0.0.1:8233"
    task_queue: str = DEFAULT_TASK_QUEUE

    s3_endpoint: str = "127.0.0.1:8333"
    s3_access_key: str = Field(default="", repr=False)  # `dev up` generates both
    s3_secret_key: str = Field(default="", repr=False)
    s3_bucket: str = "reelqueue"
    s3_secure: bool = False
    s3_region: str = "us-east-1"
    # The S3 address presigned URLs name, for whoever uses them outside our network: a tenant's
    # browser uploading (/v1/uploads) and a hosted provider reading a task's input image. A URL
    # (`https://s3.example.com`) or host:port (then s3_secure says the scheme); empty: s3_endpoint.
    # The signature covers the host, so it must be the address the client reaches S3 by.
    s3_public_endpoint: str = Field(default="", pattern=r"^((https?://)?[A-Za-z0-9.\-\[\]:]+/?)?$")

    emulator_url: str = "http://127.0.0.1:8900"
    # How `reelqueue dev up` runs the emulator: render "fast" (tiny clips) for load tests.
    emulator_render: Literal["full", "fast"] = "full"
    emulator_max_running: int = 50
    emulator_max_queued: int = 100
    emulator_api_key: str = "emulator-dev-key"
    # The Standard Webhooks secret (`whsec_...`) the emulator signs with and the gateway verifies
    # with; `dev up` makes one per stack (stack.json). Empty: the emulator offers no webhooks.
    # (Empty strings rather than None here: a drill worker gets every setting as an env string.)
    emulator_webhook_secret: str = Field(default="", repr=False)
    gateway_url: str = "http://127.0.0.1:8000"
    # HMAC key of reviewer tokens (`reelqueue review` issues, the gateway verifies); `dev up` makes
    # one per stack (stack.json). Empty: the gallery refuses every token. During a change of key the
    # gateway also accepts tokens signed with the previous one (docs/security.md, "Rotation").
    review_secret: str = Field(default="", repr=False)
    review_secret_previous: str = Field(default="", repr=False)
    review_page_size: int = Field(default=60, ge=1, le=500)  # videos per gallery page
    review_token_hours: float = Field(default=12.0, gt=0, le=24 * 30)  # how long a review link works
    provider: str = "emulator"

    # Hosted providers: REELQUEUE_<PROVIDER>_API_KEY, _BASE_URL (empty: the official URL),
    # _PRICES (JSON {model: credits per second of video}, merged over the adapter's table).
    # `dev up --emulate-providers` (emulate_providers) points every provider whose base URL is not
    # set at the emulator's dialect of it. A provider without a key is listed but its tasks end INVALID.
    emulate_providers: bool = False
    provider_submit_timeout_s: float = Field(default=20.0, gt=0, le=25)  # under the submit activity's 30 s
    runway_api_key: str = Field(default="", repr=False)
    runway_base_url: str = ""
    runway_prices: dict[str, float] = Field(default_factory=dict)
    replicate_api_key: str = Field(default="", repr=False)
    replicate_base_url: str = ""
    replicate_prices: dict[str, float] = Field(default_factory=dict)
    # From GET /v1/webhooks/default/secret (`whsec_...`); empty: Replicate webhooks are not asked for.
    replicate_webhook_secret: str = Field(default="", repr=False)
    kling_api_key: str = Field(default="", repr=False)  # the access key
    kling_secret_key: str = Field(default="", repr=False)  # signs the JWT with the access key
    kling_base_url: str = ""
    kling_prices: dict[str, float] = Field(default_factory=dict)
    luma_api_key: str = Field(default="", repr=False)
    luma_base_url: str = ""
    luma_prices: dict[str, float] = Field(default_factory=dict)
    fal_api_key: str = Field(default="", repr=False)
    fal_base_url: str = ""
    fal_prices: dict[str, float] = Field(default_factory=dict)

    # Webhooks: submits ask providers that offer them to POST to {public_url}/webhooks/{provider}.
    # public_url is the gateway as providers, reviewers and players reach it (empty: gateway_url);
    # the emulator, which runs beside the gateway, posts to gateway_url (webhook_url).
    public_url: str = ""
    webhooks_enabled: bool = Field(  # REELQUEUE_WEBHOOKS=false: submits ask for none, polling only
        default=True,
        validation_alias=AliasChoices("REELQUEUE_WEBHOOKS", "REELQUEUE_WEBHOOKS_ENABLED", "webhooks_enabled"),
    )
    webhook_orphan_ttl_s: float = Field(default=3600.0, gt=0)  # an unmatched event older than this expired
    webhook_max_body_bytes: int = Field(default=256 * 1024, gt=0)
    # The provider backstop (control/provider_backstop.py): the io worker lists every listable
    # provider's jobs of the last `backstop_window_h` hours every `backstop_every_s` (0: off).
    backstop_every_s: float = Field(default=900.0, ge=0)
    backstop_window_h: float = Field(default=24.0, gt=0, le=24 * 30)

    # Hosts the SSRF-safe fetcher may reach although they resolve to private or loopback
    # addresses (the embedded emulator and S3). Everything else must be a global address.
    fetch_allowed_hosts: list[str] = Field(default_factory=list)
    # Provider outputs are fetched over https only, except from these `host` / `host:port` entries
    # (`dev up` writes the emulator's here: it serves plain http on loopback).
    fetch_http_hosts: list[str] = Field(default_factory=list)
    fetch_max_bytes: int = 512 * 1024 * 1024
    fetch_timeout_s: float = 60.0
    # An output URL answering 403/404/410, or whose known expiry is closer than the margin, is
    # asked for afresh (a status call) at most this many times per fetch attempt.
    fetch_url_refreshes: int = Field(default=3, ge=0)
    fetch_expiry_margin_s: float = Field(default=30.0, ge=0)

    # ffmpeg caps (docs/architecture.md, "Media"): inputs beyond these are refused, not transcoded.
    media_max_input_pixels: int = Field(default=3840 * 2160, gt=0)
    media_max_input_duration_s: float = Field(default=120.0, gt=0)
    media_threads: int = Field(default=2, ge=1)
    media_nice: int = Field(default=10, ge=0, le=19)
    media_max_memory_mb: int = Field(default=3072, gt=0)  # RLIMIT_AS of each ffmpeg child

    # Admission and the status-call budget per provider, e.g.
    # REELQUEUE_PROVIDER_LIMITS='{"emulator": {"max_concurrent": 20, "polls_per_second": 20}}'.
    provider_limits: dict[str, ProviderLimits] = Field(default_factory=dict)
    # Jobs alive at once across every provider and tenant (the platform's admission layer); 0: no such layer.
    platform_max_concurrent: int = Field(default=0, ge=0)
    # How long a gate waits on a silent slot holder before checking that it still runs.
    gate_lease_s: float = Field(default=900.0, gt=0)
    # Every provider's breaker (docs/architecture.md, "Provider breaker"), e.g.
    # REELQUEUE_PROVIDER_BREAKER='{"failures": 5, "failure_ratio": 0.5, "window_s": 60, "cooldown_s": 30}'.
    provider_breaker: BreakerPolicy = Field(default_factory=BreakerPolicy)

    # Media links the gateway serves (GET /media/{token}/{file}): the HMAC key that signs their
    # tokens (its own secret; `dev up` makes one; empty: no link is signed or accepted), the previous
    # key still accepted during a change-over, and how long a link from `export` / `show` stays valid.
    media_link_secret: str = Field(default="", repr=False)
    media_link_secret_previous: str = Field(default="", repr=False)
    media_link_ttl_s: float = Field(default=24 * 3600.0, gt=0, le=7 * 24 * 3600.0)
    # `reelqueue gc` removes staging objects only once they are older than this (a fetch may still
    # be streaming into a young one).
    gc_staging_min_age_s: float = Field(default=24 * 3600.0, ge=0)
    # Uploads through presigned URLs (/v1/uploads): how long the signed PUT / part URLs work, and
    # how long an upload may stay uncompleted before it is REJECTED and its open multipart aborted.
    upload_url_ttl_s: float = Field(default=900.0, gt=0, le=7 * 24 * 3600.0)
    upload_complete_ttl_s: float = Field(default=24 * 3600.0, gt=0)

    # Worker tuning (docs/performance.md): activity slots (the thread pool has one thread per slot of
    # either kind), local activity slots (record_transition), workflow tasks at once.
    worker_max_activities: int = Field(default=8, ge=1)
    worker_max_local_activities: int = Field(default=8, ge=1)
    worker_max_workflow_tasks: int = Field(default=100, ge=1)
    # Task queues (docs/deploy.md, "Task queues and workers"): which ones `python worker.py` serves
    # ("io,media"; `--queues` overrides), the media queue's activity slots (0: one per usable core,
    # at least 2; the io queue's are worker_max_activities), and how long SIGTERM lets running
    # activities finish before they are cancelled and retried on another worker.
    worker_queues: str = "io,media"
    media_max_activities: int = Field(default=0, ge=0)
    worker_drain_s: float = Field(default=60.0, ge=0)
    # Worker Versioning (docs/deploy.md, "Rolling deploys"): the Worker Deployment this worker belongs to
    # and its build (the image tag); empty name: unversioned (the embedded stack, the tests).
    worker_deployment_name: str = ""
    worker_build_id: str = ""
    # A worker that starts while Temporal does not answer (started together, or during its restart)
    # keeps trying this long before it exits.
    worker_connect_wait_s: float = Field(default=120.0, ge=0)

    # Logs of the worker and the gateway (telemetry/logs.py): JSON lines, or text for a person.
    log_format: Literal["json", "text"] = "json"
    log_level: str = "INFO"

    # The worker's Prometheus endpoint (http://host:port/metrics); port 0 turns it off. `dev up`
    # picks a free port and writes it to stack.json; several workers on one host need one each.
    worker_metrics_host: str = "127.0.0.1"
    worker_metrics_port: int = Field(default=9464, ge=0)

    # The gateway's /metrics: with a token, only `Authorization: Bearer <token>` reads it; without one
    # it answers only on a loopback connection (Prometheus inside the host or a sidecar).
    metrics_token: str = Field(default="", repr=False)
    # The interactive API pages (/docs, /redoc) are off unless asked for; /openapi.json stays.
    api_docs: bool = False

    # The tenant API (/v1): its JSON body cap, the backlog age past which creates answer 503 (0: off),
    # the credits a generation reserves per second of video, the tasks one import request may make,
    # and the event streams one tenant may hold open on one gateway process.
    api_max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    api_backlog_max_age_s: float = Field(default=1800.0, ge=0)
    api_credits_per_second: float = Field(default=1.0, ge=0)
    api_max_import_tasks: int = Field(default=10_000, ge=1)
    api_max_streams_per_tenant: int = Field(default=5, ge=1)

    tenant: str = "default"
    tenant_credit_limit: float = 1_000_000.0
    worker_id: str = ""

    @property
    def stack_file(self) -> Path:
        return self.home / STACK_FILE

    def admission_layers(self) -> AdmissionLayers:
        """The configured layers beside the tenant's and the provider's (the platform's, the models')."""
        return AdmissionLayers(platform=self.platform_max_concurrent or None, providers=self.provider_limits)

    def webhook_url(self, provider: str) -> str | None:
        """Where `provider` should send its webhooks (the gateway's route); None when they are off."""
        if not self.webhooks_enabled:
            return None
        base = self.gateway_url if self.emulated(provider) else (self.public_url or self.gateway_url)
        return f"{base.rstrip('/')}/webhooks/{provider}"

    def emulated(self, provider: str) -> bool:
        """Whether `provider`'s calls go to the emulator (ours, on the gateway's own network, where
        the public URL may not be reachable: behind a proxy, or `localhost` in docker-compose)."""
        return provider == "emulator" or (self.emulate_providers and not getattr(self, f"{provider}_base_url", ""))

    def media_base_url(self) -> str:
        """Where clients reach the gateway's media routes (the public URL, else the gateway's)."""
        return (self.public_url or self.gateway_url).rstrip("/")

    def allowed_fetch_hosts(self) -> set[str]:
        """Configured hosts plus the emulator endpoint this process was pointed at.

        The emulator is allowed by its exact `host:port`, so allowing it opens no other port of the
        same (loopback) address: Postgres or Temporal stay unreachable through the fetcher.
        """
        from urllib.parse import urlsplit

        hosts = {h.lower() for h in self.fetch_allowed_hosts}
        netloc = urlsplit(self.emulator_url).netloc.lower()
        if netloc:
            hosts.add(netloc)
        return hosts

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, SecretFilesSource(settings_cls), StackFileSource(settings_cls),
                file_secret_settings)


class StackFileSource(PydanticBaseSettingsSource):
    """Reads the endpoints that `reelqueue dev up` chose (free ports) from stack.json."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        home = find_home()
        if home is None:
            return {}
        data = json.loads((home / STACK_FILE).read_text())
        found = {k: v for k, v in data.get("settings", {}).items() if k in Settings.model_fields}
        return {"home": str(home), **found}  # found above the current directory: `dev status/down` act on it


def find_home(start: Path | None = None) -> Path | None:
    """The running stack's home: $REELQUEUE_HOME (with its stack.json), else the nearest `.reelqueue`
    holding a stack.json at or above the current directory; None when there is none."""
    env = os.environ.get("REELQUEUE_HOME")
    if env:
        return Path(env) if (Path(env) / STACK_FILE).is_file() else None
    here = (start or Path.cwd()).resolve()
    return next((d / ".reelqueue" for d in (here, *here.parents) if (d / ".reelqueue" / STACK_FILE).is_file()), None)


def no_stack_hint() -> str | None:
    """What to tell someone whose command found no stack (and set no DATABASE_URL), else None."""
    if find_home() is not None or os.environ.get("DATABASE_URL") or os.environ.get("REELQUEUE_DATABASE_URL"):
        return None
    where = f"$REELQUEUE_HOME ({os.environ['REELQUEUE_HOME']})" if os.environ.get("REELQUEUE_HOME") else \
        f"{Path.cwd()} or any directory above it (.reelqueue/{STACK_FILE})"
    return (f"no reelqueue stack is running: none found in {where}. Start one with `reelqueue dev up` (or "
            "`make demo`), or set REELQUEUE_HOME to a stack's home, or DATABASE_URL and TEMPORAL_ADDRESS "
            "for a deployed one")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
