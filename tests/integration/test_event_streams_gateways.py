"""Live status across gateway processes (issue 48), on the real stack: a tenant's cap of 5 streams
holds across two `python -m gateway` processes (the sixth answers 429 on either); when one is killed
its streams resume on the other with Last-Event-ID and, together with the survivor's, see every event
of the tenant's import exactly once, each task's in order. A client that stops reading is ended (its
place given back) once its connection's buffers are full, while another stream of its tenant
receives every event without a reconnect."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from api_helpers import api_server
from sqlalchemy import select, text
from stack_helpers import make_catalog, make_plan

from catalog.plan import load_plan
from catalog.service import run_import
from config.settings import Settings
from schema import stream_leases, tenants
from schema.db import Database
from schema.models import StateEvent, Task

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


def _tenant_with_import(stack: Settings, folder: Path, products: int) -> tuple[str, str, str, list[str]]:
    """A new tenant (id, key) with an import of `products` tasks: (tenant, key, import id, task ids)."""
    tenant = f"streams-{uuid.uuid4().hex[:8]}"
    with Database(stack.database_url).transaction() as session:
        key = tenants.create_tenant(session, tenant, tenants.TenantLimits(rate_per_minute=100_000)).api_key
    folder.mkdir()
    catalog = make_catalog(folder, [(f"S-{n}", f"Lamp {n}", "A lamp") for n in range(products)])
    summary = run_import(stack, catalog, load_plan(make_plan(folder)), catalog=f"cat-{tenant}", tenant=tenant)
    with Database(stack.database_url).transaction() as session:
        task_ids = list(session.scalars(select(Task.id).where(Task.import_id == summary.import_id)))
    return tenant, key, summary.import_id, task_ids


def _add_events(db: Database, task_ids: list[str], per_task: int, tag: str) -> None:
    """`per_task` more applied events per task in one transaction (a valid cycle: failed, again)."""
    with db.transaction() as session:
        session.execute(text("""
            INSERT INTO state_events (task_id, source, source_event_id, event, from_status, to_status,
                                      task_version, applied, payload)
            SELECT t.id, 'test', :tag || '-' || t.id || '-' || n,
                   CASE WHEN n % 2 = 0 THEN 'validation_failed' ELSE 'revalidate' END,
                   CASE WHEN n % 2 = 0 THEN 'VALIDATING' ELSE 'INVALID' END,
                   CASE WHEN n % 2 = 0 THEN 'INVALID' ELSE 'VALIDATING' END, n, true, '{}'::jsonb
              FROM tasks t CROSS JOIN generate_series(1, :per_task) AS n
             WHERE t.id = ANY(CAST(:tasks AS text[]))
             ORDER BY n, t.id"""), {"tasks": task_ids, "per_task": per_task, "tag": tag})


def _stored(db: Database, task_ids: list[str]) -> list[int]:
    with db.transaction() as session:
        return list(session.scalars(select(StateEvent.id).where(StateEvent.task_id.in_(task_ids),
                                                                StateEvent.applied.is_(True))))


def _open_streams(db: Database, tenant: str) -> int:
    with db.transaction() as session:
        return stream_leases.open_streams(session, tenant)


def _wait(what: str, check, deadline_s: float) -> None:  # noqa: ANN001 - a callable
    deadline = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {deadline_s} s"
        time.sleep(0.2)


class Follower:
    """One client of `GET /v1/events?import_id=`: reads in a thread, and when its connection drops
    resumes with its Last-Event-ID on `url` (which the test may point elsewhere), waiting out 429s."""

    def __init__(self, url: str, key: str, import_id: str) -> None:
        self.url, self.key, self.import_id = url, key, import_id
        self.events: list[tuple[int, str]] = []  # (event_id, task_id) in the order received
        self.last_id: str | None = None
        self.connections = 0
        self.connected = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            headers = {"Authorization": f"Bearer {self.key}", "Accept": "text/event-stream",
                       **({"Last-Event-ID": self.last_id} if self.last_id else {})}
            try:
                with httpx.stream("GET", f"{self.url}/v1/events", params={"import_id": self.import_id},
                                  headers=headers, timeout=httpx.Timeout(10.0, read=30.0)) as resp:
                    if resp.status_code == 429:
                        time.sleep(float(resp.headers.get("retry-after", "1")))
                        continue
                    assert resp.status_code == 200, resp.read()
                    self.connections += 1
                    self.connected.set()
                    self._read(resp)
            except httpx.HTTPError:
                time.sleep(0.2)

    def _read(self, resp: httpx.Response) -> None:
        fields: dict[str, str] = {}
        for line in resp.iter_lines():
            if self.stop.is_set():
                return
            if line:
                name, _, value = line.partition(":")
                fields[name] = value[1:] if value.startswith(" ") else value
                continue
            if "id" in fields:
                self.last_id = fields["id"]
            if fields.get("event") == "state":
                data = json.loads(fields["data"])
                self.events.append((data["event_id"], data["task_id"]))
            fields = {}

    def close(self) -> None:
        self.stop.set()


def _exactly_once(follower: Follower, stored: list[int]) -> None:
    ids = [event_id for event_id, _ in follower.events]
    assert len(ids) == len(set(ids)), "an event was delivered twice"
    assert sorted(ids) == sorted(stored), f"{len(set(stored) - set(ids))} events lost"
    for task in {task_id for _, task_id in follower.events}:  # each task's events in order
        of_task = [event_id for event_id, task_id in follower.events if task_id == task]
        assert of_task == sorted(of_task)


@contextmanager
def _gateway_process(tmp_path: Path, name: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """`python -m gateway` on a free port, as `dev up` starts it (the stack's settings and secrets)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / f"{name}.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port)],
                            env={**os.environ, "REELQUEUE_API_MAX_STREAMS_PER_TENANT": "5"},
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            assert proc.poll() is None, (tmp_path / f"{name}.log").read_text()
            try:
                return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False
        _wait(f"gateway {name} up", up, 60)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


def _refused(url: str, key: str) -> int:
    with httpx.stream("GET", f"{url}/v1/events", headers={"Authorization": f"Bearer {key}",
                                                          "Accept": "text/event-stream"}, timeout=10) as resp:
        return resp.status_code


def test_the_cap_holds_across_gateways_and_a_killed_gateways_streams_resume_on_the_other(
        stack: Settings, tmp_path: Path) -> None:
    db = Database(stack.database_url)
    tenant, key, import_id, task_ids = _tenant_with_import(stack, tmp_path / "catalog", 3)
    with _gateway_process(tmp_path, "a") as (url_a, proc_a), _gateway_process(tmp_path, "b") as (url_b, _):
        followers = [Follower(url_a, key, import_id) for _ in range(3)] + [Follower(url_b, key, import_id)
                                                                         for _ in range(2)]
        try:
            for follower in followers:
                assert follower.connected.wait(30), "a stream did not open"
            _wait("5 streams counted", lambda: _open_streams(db, tenant) == 5, 30)
            assert _refused(url_a, key) == 429 and _refused(url_b, key) == 429  # the sixth, on either
            _add_events(db, task_ids, 10, "before")
            _wait("the first events delivered", lambda: all(len(f.events) >= 30 for f in followers), 60)
            os.kill(proc_a.pid, signal.SIGKILL)  # its 3 streams drop mid-way
            proc_a.wait(10)
            for follower in followers[:3]:
                follower.url = url_b  # the load balancer sends them to the survivor
            for round_ in range(10):  # events keep coming while they are away
                _add_events(db, task_ids, 4, f"away{round_}")
                time.sleep(0.5)
            # they resume once the killed gateway's lease expired (its streams counted until then)
            _wait("the killed gateway's streams resumed on the other",
                  lambda: all(f.connections == 2 for f in followers[:3]), 90)
            _add_events(db, task_ids, 4, "back")
            stored = _stored(db, task_ids)
            # every stream has the last event written; then nothing is missing before it, nothing twice
            _wait("the last event on every stream", lambda: all(max(stored) in {e for e, _ in f.events}
                                                                for f in followers), 60)
            time.sleep(1.0)  # nothing more (a repeat) comes after
            for follower in followers:
                _exactly_once(follower, stored)
            assert all(f.connections == 2 for f in followers[:3]) and all(f.connections == 1 for f in followers[3:])
            assert _open_streams(db, tenant) == 5 and _refused(url_b, key) == 429
        finally:
            for follower in followers:
                follower.close()


def test_a_client_that_stops_reading_is_ended_and_the_others_are_not_slowed(stack: Settings, tmp_path: Path) -> None:
    db = Database(stack.database_url)
    tenant, key, import_id, task_ids = _tenant_with_import(stack, tmp_path / "catalog", 2)
    with api_server(stack) as url:
        reader = Follower(url, key, import_id)
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
        try:
            assert reader.connected.wait(30)
            stalled.connect(("127.0.0.1", int(url.rsplit(":", 1)[1])))
            stalled.sendall(f"GET /v1/events?import_id={import_id} HTTP/1.1\r\nHost: x\r\n"
                            f"Authorization: Bearer {key}\r\nAccept: text/event-stream\r\n\r\n".encode())
            _wait("both streams open", lambda: _open_streams(db, tenant) == 2, 30)
            started = time.monotonic()
            # 24,000 events of ~300 bytes (7 MB) for both streams, in commits of 400: more than the
            # stalled connection's buffers hold (Linux grows a socket's send buffer up to 4 MiB)
            for round_ in range(60):
                _add_events(db, task_ids, 200, f"burst{round_}")
                time.sleep(0.1)
            _wait("the stalled stream ended (its place given back)", lambda: _open_streams(db, tenant) == 1, 60)
            ended_after = time.monotonic() - started
            stored = _stored(db, task_ids)
            _wait("the reader got every event", lambda: len(reader.events) >= len(stored), 60)
            _exactly_once(reader, stored)
            assert reader.connections == 1, "the reading stream was ended too"
            stalled.settimeout(30)  # what it was sent, then the end of the connection
            received = b""
            while chunk := stalled.recv(65536):
                received += chunk
            assert received.startswith(b"HTTP/1.1 200") and b"event: state" in received
            print(f"stalled stream ended {ended_after:.1f} s after the events began; it had "
                  f"{received.count(b'event: state')} of {len(stored)} events buffered")
        finally:
            reader.close()
            stalled.close()


def test_a_stopping_gateway_ends_its_streams_at_once(stack: Settings, tmp_path: Path) -> None:
    """SIGTERM: the streams end first (their clients move on), then uvicorn's graceful shutdown."""
    db = Database(stack.database_url)
    tenant, key, import_id, _ = _tenant_with_import(stack, tmp_path / "catalog", 1)
    with _gateway_process(tmp_path, "stopping") as (url, proc):
        follower = Follower(url, key, import_id)
        try:
            assert follower.connected.wait(30)
            _wait("the stream counted", lambda: _open_streams(db, tenant) == 1, 30)
            proc.send_signal(signal.SIGTERM)
            try:  # uvicorn raises the signal again once it has shut down: -15
                assert proc.wait(10) in (0, -signal.SIGTERM)
            except subprocess.TimeoutExpired:
                pytest.fail("the gateway waited for its open stream")
            _wait("its place given back", lambda: _open_streams(db, tenant) == 0, 10)
        finally:
            follower.close()


def test_a_signed_out_browser_session_ends_its_stream(stack: Settings, tmp_path: Path) -> None:
    """A stream opened with a session token ends with the session (sign-out), not only with its key."""
    _, key, import_id, _ = _tenant_with_import(stack, tmp_path / "catalog", 1)
    with api_server(stack) as url:
        token = httpx.post(f"{url}/v1/sessions", headers={"Authorization": f"Bearer {key}"}, json={},
                           timeout=10).json()["token"]
        with httpx.stream("GET", f"{url}/v1/events", params={"import_id": import_id}, timeout=httpx.Timeout(
                10.0, read=20.0), headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}) as resp:
            lines = resp.iter_lines()
            assert resp.status_code == 200 and next(lines).startswith("retry:")
            ended = httpx.delete(f"{url}/v1/sessions/current", headers={"Authorization": f"Bearer {token}"},
                                 timeout=10)
            assert ended.status_code == 204
            signed_out = time.monotonic()
            for _ in lines:  # until the server ends the stream (a keep-alive comes at least every 15 s)
                assert time.monotonic() - signed_out < 5.0, "the stream goes on after its session ended"
            assert time.monotonic() - signed_out < 5.0
