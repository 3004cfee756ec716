"""A tenant's input is held to what a tenant may say, on the real stack (docs/security.md, "What a
tenant controls"): its plan's prices and provider limits are the server's, its prompt templates are
templates, hostile ids and text answer 4xx (and the connection goes on), and its refusals name
nothing inside the network."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import socket
import time
import uuid
from pathlib import Path

import pytest
from api_helpers import api_server
from cli_helpers import run_cli
from sqlalchemy import func, select, text, update
from stack_helpers import make_plan

from adapters.storage import ObjectStorage
from config.settings import Settings
from contracts.workflow_api import tenant_gate
from control.gates import gate_snapshots, stop_gates
from reelqueue_client import ApiProblem, ReelqueueClient
from reelqueue_client.transfer import upload
from schema.db import Database
from schema.models import CatalogImport, Task
from schema.state_machine import TERMINAL
from schema.uploads import ready_asset

PNG = (Path(__file__).resolve().parents[2] / "examples" / "images" / "aurora-lamp.png").read_bytes()
CSV_HEAD = "product_id,title,description,image_url,price,currency,category\n"


def _tenant(url: str, *options: str) -> tuple[str, ReelqueueClient]:
    created = run_cli("tenants", "create", f"t-{uuid.uuid4().hex[:10]}", *options, "--json")
    assert created.code == 0, created.stdout + created.stderr
    return created.json["tenant_id"], ReelqueueClient(url, created.json["api_key"])


def _catalog(stack: Settings, api: ReelqueueClient, tenant_id: str, products: int) -> str:
    """A READY catalog upload of `products` rows sharing one uploaded image (by its presigned URL)."""
    image = upload(api, PNG, "lamp.png", "image/png")
    with Database(stack.database_url).transaction() as session:
        key = ready_asset(session, tenant_id, image.id).key
    url = ObjectStorage.from_settings(stack).presigned_url(key)
    rows = "".join(f"P-{i},Lamp {i},A lamp,{url},19.99,USD,Home\n" for i in range(products))
    catalog = upload(api, (CSV_HEAD + rows).encode(), "shop.csv", "text/csv")
    assert catalog.status == "READY", catalog.reason
    return catalog.id


async def _all_ended(stack: Settings, import_id: str, timeout_s: float = 240) -> list[Task]:
    db = Database(stack.database_url)
    for _ in range(int(timeout_s * 5)):
        with db.transaction() as session:
            tasks = list(session.scalars(select(Task).where(Task.import_id == import_id)))
            session.expunge_all()
        if tasks and all(t.status in TERMINAL for t in tasks):
            return tasks
        await asyncio.sleep(0.2)
    pytest.fail(f"the tasks of {import_id} did not end: {sorted(t.status for t in tasks)}")


async def test_a_tenant_plan_costs_the_server_price_not_its_own_estimate(stack, task_queue, tmp_path, monkeypatch,
                                                                       emulator_jobs):
    """5 credits, a plan of 2 s videos at `cost_estimate = 0`, 6 products: each task reserves the
    server's price (2 s x 1 credit) before it is submitted, so the tasks that find less than that
    free are refused and the credit never goes below 0 (at the plan's 0 all 6 ran, and it did)."""
    monkeypatch.setenv("REELQUEUE_FETCH_ALLOWED_HOSTS", json.dumps([stack.s3_endpoint]))
    with api_server(stack, task_queue) as url:
        tenant_id, api = _tenant(url, "--credits", "5")
        catalog = _catalog(stack, api, tenant_id, 6)
        plan = make_plan(tmp_path, duration_s=2).read_text().replace("cost_estimate = 3", "cost_estimate = 0")
        assert "cost_estimate = 0" in plan
        created = api.request("POST", "/v1/imports", json={"asset_id": catalog, "plan": plan}).json()
        assert (created["status"], created["tasks"]) == ("ACCEPTED", 6)
        with Database(stack.database_url).transaction() as session:
            estimates = set(session.scalars(select(Task.estimated_cost).where(Task.import_id == created["import_id"])))
        assert estimates == {2}
        api.request("POST", f"/v1/imports/{created['import_id']}/run")
        tasks = await _all_ended(stack, created["import_id"])
        me = api.request("GET", "/v1/me").json()
    succeeded = [t for t in tasks if t.status == "SUCCEEDED"]
    jobs = [j for j in emulator_jobs() if any(t.id in json.dumps(j) for t in tasks)]
    assert me["credit_available"] >= 0, me  # each settles at what it cost; none started without 2 credits free
    assert len(jobs) == len(succeeded) < 6, (len(jobs), len(succeeded))
    assert all("credit" in (t.last_error or "") for t in tasks if t.status != "SUCCEEDED"), \
        [t.last_error for t in tasks]


async def test_a_tenant_plan_limits_only_its_own_tasks(stack, client, task_queue, tmp_path, monkeypatch):
    """`[providers.emulator] max_concurrent = 1` in a tenant's plan lands in that tenant's own gate;
    the provider's gate keeps the operator's limit; the provider's rate is not the tenant's to set."""
    monkeypatch.setenv("REELQUEUE_FETCH_ALLOWED_HOSTS", json.dumps([stack.s3_endpoint]))
    with api_server(stack, task_queue) as url:
        tenant_id, api = _tenant(url)
        catalog = _catalog(stack, api, tenant_id, 1)
        plan = make_plan(tmp_path, duration_s=2, extra="[providers.emulator]\nmax_concurrent = 1\n").read_text()
        created = api.request("POST", "/v1/imports", json={"asset_id": catalog, "plan": plan}).json()
        api.request("POST", f"/v1/imports/{created['import_id']}/run")
        (task,) = await _all_ended(stack, created["import_id"])
        assert task.status == "SUCCEEDED", task.last_error
        own = tenant_gate(tenant_id)
        try:
            read = await gate_snapshots(stack.model_copy(update={"task_queue": task_queue}), ["emulator", own],
                                        budget_s=10)
        finally:
            await stop_gates(client, task_queue, [own])
        assert read["emulator"].snapshot.limit == 20  # the configured default, not the plan's 1
        assert read[own].snapshot.limit == 1  # the tenant's own layer took the plan's ask
        rate = make_plan(tmp_path, duration_s=2, extra="[providers.emulator]\nsubmits_per_minute = 1\n").read_text()
        with pytest.raises(ApiProblem) as refused:
            api.request("POST", "/v1/imports", json={"asset_id": catalog, "plan": rate})
        assert (refused.value.status, refused.value.slug) == (422, "plan-invalid")
        assert "submits_per_minute" in refused.value.detail


def _plan_refused(stack, url: str, plan: str) -> tuple[ReelqueueClient, str, str]:
    """POST /v1/imports of `plan` by a new tenant with a one-product catalog: 422 `plan-invalid` and no
    import written. The tenant's client, its catalog's asset id and the refusal's detail."""
    tenant_id, api = _tenant(url)
    catalog = upload(api, (CSV_HEAD + "P-1,Lamp,A lamp,https://example.com/a.png,1,USD,Home\n").encode(),
                     "shop.csv", "text/csv")
    with pytest.raises(ApiProblem) as refused:
        api.request("POST", "/v1/imports", json={"asset_id": catalog.id, "plan": plan, "check_urls": False})
    assert (refused.value.status, refused.value.slug) == (422, "plan-invalid")
    with Database(stack.database_url).transaction() as session:
        assert session.scalar(select(func.count()).select_from(CatalogImport)
                              .where(CatalogImport.tenant_id == tenant_id)) == 0
    return api, catalog.id, refused.value.detail


def test_a_tenant_plan_naming_an_unknown_fallback_is_refused_naming_the_field(stack, tmp_path):
    """The same check as `reelqueue import`: 422 naming the template's fallback field, nothing written."""
    with api_server(stack) as url:
        plan = make_plan(tmp_path, template_extra='fallbacks = [{ provider = "runway", model = "gen9" }]').read_text()
        _, _, detail = _plan_refused(stack, url, plan)
    assert "templates[0].fallbacks[0].model: runway has no model 'gen9'" in detail


def test_a_tenant_plan_cannot_raise_its_imports_priority(stack, tmp_path):
    """An import's tasks are bulk; only the operator's plan may make them interactive (the API's line):
    `priority = "interactive"` from a tenant is 422 naming the field, nothing written; "bulk" is taken."""
    plan = make_plan(tmp_path).read_text()
    with api_server(stack) as url:
        api, catalog, detail = _plan_refused(stack, url, f'priority = "interactive"\n{plan}')
        taken = api.request("POST", "/v1/imports", json={"asset_id": catalog, "plan": f'priority = "bulk"\n{plan}',
                                                         "check_urls": False})
    assert "plan: priority:" in detail
    assert taken.status_code in (200, 201, 202), taken.text


def test_prompt_templates_accept_only_named_fields(stack, tmp_path):
    """A format spec, attribute or index access, a conversion or an unknown name: 422 naming the
    template and the placeholder, and no import written."""
    with api_server(stack) as url:
        tenant_id, api = _tenant(url)
        catalog = upload(api, (CSV_HEAD + "P-1,Lamp,A lamp,https://example.com/a.png,1,USD,Home\n").encode(),
                         "shop.csv", "text/csv")
        for placeholder in ("{title:>5000000}", "{title.nope}", "{title[0]}", "{title!r}", "{0}", "{secret}",
                            "{title"):
            plan = make_plan(tmp_path).read_text().replace("{title}", placeholder)
            with pytest.raises(ApiProblem) as refused:
                api.request("POST", "/v1/imports", json={"asset_id": catalog.id, "plan": plan, "check_urls": False})
            assert (refused.value.status, refused.value.slug) == (422, "plan-invalid"), placeholder
            detail = refused.value.detail
            assert "template tpl" in detail and (placeholder in detail or "brace" in detail), detail
    with Database(stack.database_url).transaction() as session:
        assert session.scalar(select(func.count()).select_from(CatalogImport)
                              .where(CatalogImport.tenant_id == tenant_id)) == 0


def _exchange(sock: socket.socket, request: bytes) -> bytes:
    """One request on an open connection and the status line of its answer."""
    return _answer(sock, request)[0]


def _answer(sock: socket.socket, request: bytes) -> tuple[bytes, bytes, bytes]:
    """One request on an open connection: the status line, the whole body (by Content-Length) and
    the head."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection was closed: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the connection was closed mid-answer"
        body += chunk
    return head.split(b"\r\n")[0], body, head


class _Connection:
    """One keep-alive connection to the gateway as a tenant: each call's status and problem body;
    a connection the gateway dropped is noted (and a new one opened, so later probes still run)."""

    def __init__(self, url: str, key: str) -> None:
        self.port, self.key = int(url.rsplit(":", 1)[1]), key
        self.dropped: list[str] = []
        self.last = ""
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)

    def call(self, method: str, path: str, body: object = None, **headers: str) -> tuple[int, dict]:
        content = json.dumps(body).encode() if body is not None else b""
        lines = [f"{method} {path} HTTP/1.1", "Host: x", f"Authorization: Bearer {self.key}",
                 f"Content-Length: {len(content)}", *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items())]
        if body is not None:
            lines.append("Content-Type: application/json")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode() + content
        try:
            status, answer, head = _answer(self.sock, request)
        except (AssertionError, OSError):  # closed after the previous answer: noted, asked again
            self.dropped.append(self.last)
            self.sock.close()
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
            status, answer, head = _answer(self.sock, request)
        self.last = f"{method} {path[:60]}"
        try:
            return int(status.split()[1]), json.loads(answer or b"{}")
        except ValueError:  # a 500's plain text
            return int(status.split()[1]), {"detail": answer.decode(errors="replace")}


def _b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _clip(tmp_path: Path) -> bytes:
    import ffmpeg

    from adapters.media.ffmpeg_tools import run_ffmpeg

    clip = tmp_path / "clip.mp4"
    run_ffmpeg(ffmpeg.input("testsrc2=s=64x48:r=10:d=1", f="lavfi").output(str(clip), vcodec="libx264"), "clip")
    return clip.read_bytes()


def test_issue_44_probes_answer_4xx_naming_the_field_on_one_connection(stack, tmp_path):
    """Issue 44, points 6-11 and its "also seen" list: each probe answered 500 (and the gateway dropped
    the keep-alive connection) or was taken. Each answers 4xx with a problem body naming the field,
    nothing is written, the connection goes on; values at a column's size are taken. Every probe runs
    and the wrong answers are listed together."""
    wrong: list[str] = []

    def expect(probe: str, answer: tuple[int, dict], status: int, said: str) -> None:
        code, problem = answer
        if code != status or said not in problem.get("detail", ""):
            wrong.append(f"{probe}: {code} {problem.get('detail', '')[:160]!r}")

    with api_server(stack) as url:
        tenant_id, api = _tenant(url)
        conn = _Connection(url, api.headers["Authorization"].split()[1])
        lamp = "https://example.com/a.png"
        catalog = upload(api, f"{CSV_HEAD}P-1,Lamp,A lamp,{lamp},1,USD,Home\n".encode(), "shop.csv", "text/csv")
        plan = make_plan(tmp_path).read_text()

        # 6: a cursor is valid base64 of hostile JSON
        for raw in ('["2020-01-01T00:00:00","\\u0000"]', '["2020-01-01T00:00:00","\\ud800"]'):
            expect(f"cursor {raw}", conn.call("GET", f"/v1/generations?cursor={_b64(raw)}"), 400, "cursor")
        # 7, 10, 11: a plan's TOML escapes write control and bidi characters in any of its texts
        for field, change in (("name", ('name = "t"', r'name = "x\u0000y"')),
                              ("name", ('name = "t"', r'name = "p\u001b[41mPLAN\u001b[0m"')),
                              ("templates.0.id", ('id = "tpl"', r'id = "t\u0000pl"')),
                              ("templates.0.model", ('version = "tpl-v1"', 'version = "tpl-v1"\nmodel = "e\\u0007"')),
                              ("templates.0.prompts.en-US", ("Product shot", r"Product\u0008shot")),
                              ("templates.0.prompts", ('"en-US" = "Product', r'"en\u0000US" = "Product')),
                              ("variants.0.hook.en-US", ('"Hook en-US"', r'"ok \u202eevorppa\u202c"')),
                              ("templates.0.duration_s", ("duration_s = 2", "duration_s = 1E-7"))):
            changed = plan.replace(*change)
            assert changed != plan, change
            answer = conn.call("POST", "/v1/imports", {"asset_id": catalog.id, "plan": changed, "check_urls": False})
            expect(f"plan {change[1]!r}", answer, 422, field)
        # 8: a catalog file name too long for a catalog's name (and for a temporary path)
        named = upload(api, f"{CSV_HEAD}P-2,Lamp,A lamp,{lamp},1,USD,Home\n".encode(), "c" * 246 + ".csv", "text/csv")
        expect("catalog of a 250-character file name", conn.call(
            "POST", "/v1/imports", {"asset_id": named.id, "plan": plan, "check_urls": False}), 422, "catalog")
        # 11: an upload name with a bidi override
        expect("upload name x\u202evsc.exe", conn.call("POST", "/v1/uploads", {
            "filename": "x\u202evsc.exe", "size": 3, "content_type": "text/csv", "sha256": "ab" * 32}), 422, "filename")
        # also seen: a prompt of only U+200B
        image = upload(api, PNG, "lamp.png", "image/png")
        blank = {"prompt": "\u200b", "image_asset_id": image.id}
        expect("prompt of U+200B", conn.call("POST", "/v1/generations", blank, Idempotency_Key=uuid.uuid4().hex),
               400, "prompt")

        # 8, 10: values at and past each column's size, and ESC in a product id: issues of their rows
        rows = (f"{'P' * 300},Lamp,A lamp,{lamp},99999999999999.99,USD,Home\n"
                f"{'Q' * 301},Lamp,A lamp,{lamp},1,USD,Home\n"
                f"P-3,Lamp,A lamp,{lamp},1000000000000000,USD,Home\n"
                f"P\x1b[41mX,Lamp,A lamp,{lamp},1,USD,Home\n")
        values = upload(api, (CSV_HEAD + rows).encode(), "values.csv", "text/csv")
        code, created = conn.call("POST", "/v1/imports", {"asset_id": values.id, "plan": plan, "check_urls": False})
        if code != 201:
            wrong.append(f"catalog values past their columns: {code} {created.get('detail', '')[:160]!r}")
        else:
            issues = conn.call("GET", f"/v1/imports/{created['import_id']}")[1]["issues"]
            said = {(i["field"], i["action"]) for i in issues}
            assert {("product_id", "row_invalid"), ("price", "rejected"), ("(row)", "row_invalid")} <= said, issues
            assert created["tasks"] == 2, created

        status = conn.call("GET", "/v1/me")[0]
        # 9: a video whose name would make its stored key too long; also seen: an image's size
        try:
            video = upload(api, _clip(tmp_path), "v." + "x" * 250, "video/mp4")
            if video.status != "READY":
                wrong.append(f"video named v.+250: {video.status} {video.reason}")
        except ApiProblem as exc:
            wrong.append(f"video named v.+250: {exc.status} {exc.detail}")
        lamp_size = (image.width, image.height)
    assert status == 200 and not conn.dropped and not wrong, "\n".join(
        [f"GET /v1/me: {status}", *(f"dropped after {d}" for d in conn.dropped), *wrong])
    assert lamp_size == (640, 640)
    with Database(stack.database_url).transaction() as session:
        assert session.scalar(select(func.count()).select_from(CatalogImport)
                              .where(CatalogImport.tenant_id == tenant_id)) == 1  # the values' import only
        key = ready_asset(session, tenant_id, video.id, kind="VIDEO").key
    assert key.endswith(".mp4") and "xxx" not in key, key


def test_hostile_ids_and_text_answer_4xx_and_the_connection_goes_on(stack, tmp_path):
    with api_server(stack) as url:
        tenant_id, api = _tenant(url)
        key = api.headers["Authorization"].split()[1]
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            for path in ("/v1/generations/%00", "/v1/generations/%01x", "/v1/generations/" + "a" * 5000,
                         "/v1/generations?status=%00", "/v1/generations?import_id=%00",
                         "/v1/events?task_id=%00", "/v1/assets/%00", "/v1/imports/%00"):
                status = _exchange(sock, f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n"
                                   .encode())
                assert status.split()[1].startswith(b"4"), (path, status)
            status = _exchange(sock, f"GET /v1/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
            assert status.split()[1] == b"200", status  # the same connection still serves

        deep = base64.urlsafe_b64encode(b"[" * 3000).decode().rstrip("=")
        for cursor in (deep, base64.urlsafe_b64encode(b'[["x"], "y"]').decode(), "%00"):
            with pytest.raises(ApiProblem) as refused:
                api.request("GET", "/v1/generations", params={"cursor": cursor})
            assert 400 <= refused.value.status < 500, cursor

        image = upload(api, PNG, "lamp.png", "image/png")
        for prompt in ("a lamp \u0000", "\u0007 bell", "ok"):
            body = {"prompt": prompt, "image_asset_id": image.id, "duration_s": 2,
                    **({"provider": "emu\u0000lator"} if prompt == "ok" else {})}
            with pytest.raises(ApiProblem) as refused:
                api.request("POST", "/v1/generations", json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
            assert refused.value.status == 422, (prompt, refused.value)
        catalog = upload(api, (CSV_HEAD + "P-1,Lamp,A lamp,https://example.com/a.png,1,USD,Home\n").encode(),
                         "shop.csv", "text/csv")
        plan = make_plan(tmp_path).read_text()
        for body in ({"asset_id": catalog.id, "plan": plan.replace("Product shot", "Product\u0000shot")},
                     {"asset_id": catalog.id, "plan": plan, "catalog": "shop\u0000"},
                     {"asset_id": catalog.id, "plan": {"name": "t\u0000", "locales": ["en-US"],
                                                       "aspect_ratios": ["9:16"], "templates": []}}):
            with pytest.raises(ApiProblem) as refused:
                api.request("POST", "/v1/imports", json={**body, "check_urls": False})
            assert refused.value.status == 422, refused.value
        # a NUL past the first MiB (the upload's text check reads that far): the row is invalid, no 500
        long = f"P-0,Lamp,{'x' * (1024 * 1024)},,1,USD,Home\n"  # copy review: too long a description
        bad = "P-x,La\u0000mp,A lamp,https://example.com/a.png,1,USD,Home\n"  # was a 500 (COPY refused it)
        nul = upload(api, (CSV_HEAD + long + bad).encode(), "big.csv", "text/csv")
        assert nul.status == "READY" and nul.size > 1024 * 1024
        created = api.request("POST", "/v1/imports", json={"asset_id": nul.id, "plan": plan, "check_urls": False})
        issues = api.request("GET", f"/v1/imports/{created.json()['import_id']}").json()["issues"]
        assert any("NUL" in i["reason"] for i in issues), (created.json(), issues)
    with Database(stack.database_url).transaction() as session:
        assert session.scalar(select(func.count()).select_from(Task).where(Task.tenant_id == tenant_id)) == 0


def test_refusals_name_no_internal_address_path_or_tool_output(stack, tmp_path):
    """An image URL whose name resolves to a loopback address (the number form of 127.0.0.1: no DNS,
    no connection) and a "video" ffprobe cannot read: the tenant reads a stable reason."""
    with api_server(stack) as url:
        tenant_id, api = _tenant(url)
        catalog = upload(api, (CSV_HEAD + "P-1,Lamp,A lamp,https://2130706433/a.png,1,USD,Home\n").encode(),
                         "shop.csv", "text/csv")
        created = api.request("POST", "/v1/imports", json={"asset_id": catalog.id,
                                                           "plan": make_plan(tmp_path).read_text()}).json()
        issues = api.request("GET", f"/v1/imports/{created['import_id']}").json()["issues"]
        reasons = " ".join(i["reason"] for i in issues)
        assert "image URL refused" in reasons, issues
        assert "127.0.0.1" not in reasons and "resolves to" not in reasons, reasons

        video = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom" + hashlib.sha256(b"x").digest() * 64
        rejected = upload(api, video, "clip.mp4", "video/mp4")
        assert rejected.status == "REJECTED"
        assert "not a readable video" in rejected.reason, rejected.reason
        for leak in ("/tmp", "ffprobe", "upload-", "Invalid data"):
            assert leak not in rejected.reason, rejected.reason


def test_reservations_that_waited_for_the_tenant_lock_see_the_holds_made_meanwhile(stack, tmp_path):
    """Six 3-credit reservations wait while another transaction holds the tenant row and writes a
    5-credit hold of 10 credits: when it commits, 5 credits are left, so one reservation passes.
    (When the credit was read in the statement that waited for the lock, it was read as before the
    hold, and all six passed: 23 credits held on 10.)"""
    from concurrent.futures import ThreadPoolExecutor

    from stack_helpers import import_small
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from activities.errors import INSUFFICIENT_CREDIT
    from activities.ledger import LedgerActivities
    from contracts.messages import SettleInput, TaskRef
    from schema import queries
    from schema.models import CreditEntry

    tenant = stack.model_copy(update={"tenant": f"race-{uuid.uuid4().hex[:8]}", "tenant_credit_limit": 10})
    products = [(f"R-{i}", "Lamp", "A lamp") for i in range(7)]
    summary = import_small(tenant, tmp_path, products, duration_s=2)  # cost_estimate 3 (operator plan)
    db = Database(stack.database_url)
    with db.transaction() as session:
        first, *others = (t.id for t in queries.list_tasks(session, summary.import_id))
    ledger = LedgerActivities(db)

    def reserve(task_id: str) -> bool:
        try:
            ActivityEnvironment().run(ledger.reserve_credit, TaskRef(task_id=task_id))
        except ApplicationError as exc:
            assert exc.type == INSUFFICIENT_CREDIT, exc
            return False
        return True

    with ThreadPoolExecutor(len(others)) as pool:
        with db.transaction() as session:
            session.execute(text("SELECT 1 FROM tenants WHERE id = :t FOR UPDATE"), {"t": tenant.tenant})
            session.add(CreditEntry(tenant_id=tenant.tenant, task_id=first, entry_type="RESERVE", amount=5,
                                    business_key=f"reserve:{first}", run_no=1))
            session.flush()
            passed = [pool.submit(reserve, task_id) for task_id in others]
            for _ in range(300):  # until every reservation waits for the tenant row
                session.execute(text("SELECT pg_stat_clear_snapshot()"))  # else read once per transaction
                waiting = session.execute(text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")).scalar()
                if waiting >= len(others):
                    break
                time.sleep(0.05)
            assert waiting >= len(others), waiting
        assert sum(f.result() for f in passed) == 1
    with db.transaction() as session:
        held = session.scalar(select(func.sum(CreditEntry.amount)).where(CreditEntry.tenant_id == tenant.tenant))
    assert held == 8
    for task_id in (first, *others):  # nothing ran: every hold released (the suite's ledger check)
        ActivityEnvironment().run(ledger.settle, SettleInput(task_id=task_id, attempt_no=1, cost=0.0))


def test_the_cli_prints_no_control_character_from_tenant_text(stack, tmp_path):
    """Issue 44.10: a catalog name, a plan name, a product id, a variant and an error holding ESC
    sequences, BEL, backspace, a bidi override and rich markup (rows written before the rule at the
    door, or by an operator's own import) reached the terminal as they were: `imports` and `tasks`
    coloured the operator's terminal. Human output shows them as escapes (markup as written); the
    JSON keeps the values, with those characters as JSON escapes."""
    from stack_helpers import import_small

    from contracts.tenant_text import UNSAFE

    hostile = "p\x1b[41mX\x07\x08\u202ey[b]z"
    imp = import_small(stack, tmp_path, [("P-1", "Lamp", "A lamp")]).import_id
    with Database(stack.database_url).transaction() as session:
        session.execute(text("UPDATE catalog_imports SET catalog = :h WHERE id = :i"), {"h": hostile, "i": imp})
        session.execute(update(Task).where(Task.import_id == imp).values(
            product_id=hostile, variant=hostile, last_error=hostile, last_error_class="x"))
        task_id = session.scalar(select(Task.id).where(Task.import_id == imp))
    shown = []
    for args in (("imports",), ("tasks", imp), ("show", task_id)):
        for as_json in ((), ("--json",)):
            out = run_cli(*args, *as_json)
            assert out.code == 0, (args, out.stdout, out.stderr)
            found = UNSAFE.search(out.stdout)
            markup = bool(as_json) or "[b]" in out.stdout  # markup as written
            shown.append((args[0], *as_json, found.group() if found else None, markup))
            if as_json and args[0] == "tasks":
                assert out.json["tasks"][0]["product_id"] == hostile
    assert all(found is None and markup for *_, found, markup in shown), shown
