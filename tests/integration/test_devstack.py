"""The embedded stack for real: Postgres, SeaweedFS S3 and Temporal started, used, stopped."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from minio import Minio
from minio.error import S3Error
from sqlalchemy.engine import make_url
from temporalio import workflow
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.worker import Worker

import devstack
from config.settings import Settings
from devstack.ports import port_is_free
from devstack.probes import psycopg_conninfo
from devstack.procs import is_alive
from workflows.search_attributes import TASK_STATUS

pytestmark = pytest.mark.integration

INFRA = ["postgres", "s3", "temporal"]
ENDPOINT_VARS = [
    "DATABASE_URL",
    "REELQUEUE_DATABASE_URL",
    "REELQUEUE_S3_ENDPOINT",
    "REELQUEUE_TEMPORAL_ADDRESS",
    "REELQUEUE_TEMPORAL_UI_URL",
    "REELQUEUE_EMULATOR_URL",
    "REELQUEUE_GATEWAY_URL",
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, devstack.StackStatus]]:
    home = tmp_path_factory.mktemp("devstack")
    patch = pytest.MonkeyPatch()
    patch.setenv("REELQUEUE_HOME", str(home))
    for var in ENDPOINT_VARS:
        patch.delenv(var, raising=False)
    settings = Settings()
    try:
        yield settings, devstack.up(settings, services=INFRA)
    finally:
        devstack.down(settings)
        patch.undo()


def _stack_ports(settings: Settings) -> dict[str, int]:
    return json.loads(settings.stack_file.read_text())["ports"]


def test_up_reports_each_started_service(stack: tuple[Settings, devstack.StackStatus]) -> None:
    _, first = stack
    data = first.model_dump()
    assert set(data) == {"services"}
    assert list(data["services"]) == devstack.service_names()
    for name in [*INFRA, "temporal_ui"]:
        entry = data["services"][name]
        assert entry["up"] is True, name
        assert isinstance(entry["pid"], int) and entry["url"], name
    assert data["services"]["temporal_ui"]["pid"] == data["services"]["temporal"]["pid"]
    for name in ("emulator", "gateway", "worker"):
        assert data["services"][name]["up"] is False and data["services"][name]["pid"] is None


def test_stack_json_is_what_settings_reads(stack: tuple[Settings, devstack.StackStatus]) -> None:
    settings, first = stack
    home = Path(settings.home)
    for name in INFRA:
        assert (home / "pids" / f"{name}.pid").exists() and (home / "logs" / f"{name}.log").exists()
    fresh = Settings()  # REELQUEUE_HOME points at the stack: endpoints come from stack.json
    assert f"http://{fresh.s3_endpoint}" == first.services["s3"].url
    assert fresh.temporal_address == first.services["temporal"].url
    assert fresh.temporal_ui_url == first.services["temporal_ui"].url
    ports = _stack_ports(settings)
    assert first.services["postgres"].url.endswith(f"127.0.0.1:{ports['postgres']}/reelqueue")
    assert make_url(fresh.database_url).render_as_string(hide_password=True) == first.services["postgres"].url
    assert make_url(fresh.database_url).password  # the role's random password (scram-sha-256)


def test_postgres_answers_sql(stack: tuple[Settings, devstack.StackStatus]) -> None:
    settings = devstack.effective_settings(stack[0])
    with psycopg.connect(psycopg_conninfo(settings.database_url)) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
        assert conn.execute("select current_database(), current_user").fetchone() == ("reelqueue",) * 2
    assert devstack.ensure_database(settings) is False  # exists already: a no-op


def _connects_within(conninfo: str, seconds: float) -> bool:
    """True once a connection succeeds; False if none did within `seconds` (0: one try)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            psycopg.connect(conninfo, connect_timeout=5).close()
            return True
        except psycopg.OperationalError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


def test_a_data_dir_from_before_passwords_gets_the_stack_password(stack: tuple[Settings, devstack.StackStatus]) -> None:
    """An older `dev up` made the cluster with `--auth=trust`: the first `up` of this version sets the
    role's password (the one in stack.json) and asks every connection for it from then on."""
    from devstack import postgres

    settings = devstack.effective_settings(stack[0])
    pgdata = Path(settings.home) / "data" / "postgres"
    hba = pgdata / "pg_hba.conf"
    scram = hba.read_text()
    url = make_url(settings.database_url)
    without = f"host={url.host} port={url.port} user={url.username} dbname={url.database}"  # no password
    with psycopg.connect(psycopg_conninfo(settings.database_url), autocommit=True) as conn:
        hba.write_text(scram.replace("scram-sha-256", "trust"))  # what initdb --auth=trust wrote
        conn.execute("select pg_reload_conf()")
    assert _connects_within(without, 10)  # trust: anyone local (once the postmaster has reloaded)
    assert postgres.ensure_password(settings, pgdata) is True
    assert "trust" not in [line.split()[-1] for line in hba.read_text().splitlines() if line.strip()
                           and not line.startswith("#")]
    deadline = time.monotonic() + 10
    while _connects_within(without, 0) and time.monotonic() < deadline:  # the reload is asynchronous
        time.sleep(0.1)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(without, connect_timeout=5).close()
    with psycopg.connect(psycopg_conninfo(settings.database_url)) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
    assert postgres.ensure_password(settings, pgdata) is False  # done once


def test_s3_enforces_the_configured_credentials(stack: tuple[Settings, devstack.StackStatus]) -> None:
    settings = devstack.effective_settings(stack[0])

    def client(secret: str) -> Minio:
        return Minio(
            settings.s3_endpoint,
            access_key=settings.s3_access_key,
            secret_key=secret,
            secure=False,
            region=settings.s3_region,
        )

    good = client(settings.s3_secret_key)
    assert good.bucket_exists(settings.s3_bucket)
    good.put_object(settings.s3_bucket, "devstack/hello.txt", io.BytesIO(b"hello"), 5)
    assert good.get_object(settings.s3_bucket, "devstack/hello.txt").read() == b"hello"
    with pytest.raises(S3Error) as refused:
        client("not-the-secret").get_object(settings.s3_bucket, "devstack/hello.txt").read()
    assert refused.value.code in {"SignatureDoesNotMatch", "AccessDenied", "InvalidAccessKeyId"}


async def _custom_search_attributes(settings: Settings) -> dict[str, int]:
    client = await Client.connect(settings.temporal_address, namespace=settings.temporal_namespace)
    found = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=settings.temporal_namespace)
    )
    return dict(found.custom_attributes)


async def test_temporal_has_the_custom_search_attributes(
    stack: tuple[Settings, devstack.StackStatus],
) -> None:
    found = await _custom_search_attributes(devstack.effective_settings(stack[0]))
    for name in devstack.SEARCH_ATTRIBUTES:
        assert found.get(name) == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD, name


@workflow.defn(name="DevstackUpsertProbe", sandboxed=False)
class UpsertProbe:
    """Sets the custom TaskStatus attribute after its start, as GenerationWorkflow does."""

    @workflow.run
    async def run(self, value: str) -> None:
        workflow.upsert_search_attributes([TASK_STATUS.value_set(value)])


def _persistence_calls(settings: Settings) -> dict[str, float]:
    """The dev server's persistence calls so far, by operation (its own /metrics)."""
    from bench.common import by_label, scrape, temporal_metrics_url

    return by_label(scrape(temporal_metrics_url(settings)), "persistence_requests", "operation")


async def _until(check, what: str, deadline_s: float = 60.0) -> None:  # noqa: ANN001 - an async predicate
    deadline = time.monotonic() + deadline_s
    while not await check():
        assert time.monotonic() < deadline, f"not within {deadline_s} s: {what}"
        await asyncio.sleep(0.2)


async def test_temporal_serves_the_custom_search_attributes_from_its_cache(
    stack: tuple[Settings, devstack.StackStatus],
) -> None:
    """Upserts of a custom attribute work, can be searched, and cost no read of the cluster's metadata
    each (the dev server's default forces one per use: several per workflow)."""
    settings = devstack.effective_settings(stack[0])
    client = await Client.connect(settings.temporal_address, namespace=settings.temporal_namespace)
    runs, queue, value = 10, f"upsert-probe-{uuid.uuid4().hex[:8]}", f"PROBE_{uuid.uuid4().hex[:8]}"
    before = _persistence_calls(settings)
    async with Worker(client, task_queue=queue, workflows=[UpsertProbe]):
        for n in range(runs):
            await client.execute_workflow(UpsertProbe.run, value, id=f"{queue}-{n}", task_queue=queue)

    async def all_found() -> bool:
        return (await client.count_workflows(f"TaskStatus = '{value}'")).count == runs

    await _until(all_found, f"{runs} workflows found by TaskStatus")
    moved: dict[str, float] = {}

    async def counted() -> bool:  # the server publishes its counters about once a second
        moved.update({k: v - before.get(k, 0.0) for k, v in _persistence_calls(settings).items()})
        return moved.get("CreateWorkflowExecution", 0.0) >= runs

    await _until(counted, "the server's counters show the runs")
    assert moved.get("GetCurrentClusterMetadata", 0.0) < runs, moved


def test_up_again_is_a_no_op(stack: tuple[Settings, devstack.StackStatus]) -> None:
    settings, first = stack
    ports = _stack_ports(settings)
    started = time.monotonic()
    again = devstack.up(settings, services=INFRA)
    assert time.monotonic() - started < 5
    for name in INFRA:
        assert again.services[name].pid == first.services[name].pid
        assert again.services[name].up
    assert _stack_ports(settings) == ports


async def test_killed_service_comes_back_on_its_port(stack: tuple[Settings, devstack.StackStatus]) -> None:
    settings, first = stack
    old = first.services["temporal"].pid
    assert devstack.kill_service(settings, "temporal", signal.SIGKILL) == old
    assert devstack.status(settings).services["temporal"].up is False
    assert devstack.kill_service(settings, "temporal") is None  # nothing recorded alive
    back = devstack.restart_service(settings, "temporal")
    assert back.services["temporal"].up and back.services["temporal"].pid not in (None, old)
    assert back.services["temporal"].url == first.services["temporal"].url
    found = await _custom_search_attributes(devstack.effective_settings(settings))
    assert set(devstack.SEARCH_ATTRIBUTES) <= set(found)


def test_down_stops_everything(stack: tuple[Settings, devstack.StackStatus]) -> None:
    settings, _ = stack
    pids = [devstack.running_pid(settings, name) for name in INFRA]
    ports = _stack_ports(settings)
    stopped = devstack.down(settings)
    assert not any(s.up or s.pid for s in stopped.services.values())
    for pid in pids:
        assert pid is not None and not is_alive(pid)
    assert not list((Path(settings.home) / "pids").glob("*.pid"))
    deadline = time.monotonic() + 5
    while not all(port_is_free(p) for p in ports.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(port_is_free(p) for p in ports.values())
