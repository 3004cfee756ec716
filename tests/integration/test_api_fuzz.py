"""Schemathesis against a live gateway with Temporal and a worker behind it: requests generated
from the /v1 OpenAPI document, as a tenant that has a READY image and a READY catalog, must never
answer 5xx. Three parts, seeded:

- every operation on its own, each generated case sometimes carrying a hostile string (NUL,
  control characters, a lone surrogate, an over-long value, a format string) in a path parameter,
  a query parameter or a body field;
- stateful: the document's operations joined by OpenAPI links (create a generation, an import or an
  upload, then read, list, follow, run, cancel and complete them with the returned ids), with the
  tenant's real asset ids and a valid plan among the generated values, so creates, imports and runs
  reach their real paths (workflows start, reservations are made, the worker runs them);
- crafted (issue 44), what a schema cannot generate: cursors that are valid base64 of hostile JSON,
  plans whose TOML escapes write control, bidi and invisible characters into each of their texts,
  catalogs with values at and past each column's size and file names too long to name a catalog.

The suite's budget is small; `REELQUEUE_FUZZ_EXAMPLES` (per operation) and
`REELQUEUE_FUZZ_SCENARIOS` make a larger run on demand (docs/security.md has the figure)."""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import json
import os
import time
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import requests
import schemathesis
from api_helpers import api_server
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from stack_helpers import make_plan

from adapters.storage import ObjectStorage
from reelqueue_client import ReelqueueClient
from reelqueue_client.transfer import upload
from schema import tenants
from schema.db import Database
from schema.models import Task
from schema.state_machine import TERMINAL
from schema.uploads import ready_asset

EXAMPLES = int(os.environ.get("REELQUEUE_FUZZ_EXAMPLES", "8"))  # per operation
SCENARIOS = int(os.environ.get("REELQUEUE_FUZZ_SCENARIOS", "8"))  # stateful runs, up to STEPS calls each
STEPS = 6
SWEEP = ["\x00", "\x1b", "\ud800", "x" * 5000]
URL_SAFE = ":/?#[]@!$&'()*+,;=%~"
PNG = (Path(__file__).resolve().parents[2] / "examples" / "images" / "aurora-lamp.png").read_bytes()
HOSTILE = ["\x00", "a\x00b", "\x01", "\x1b[2J", "\x7f", "\r\n", "\t", "\ud800", "\u202e", "x" * 5000, "%00",
           "../../etc/passwd", "[" * 3000, "{title:>5000000}", "{title.__class__}", "' OR 1=1 --", "1:1:", ""]


def _operation_id(doc: dict, method: str, path: str) -> str:
    return doc["paths"][path][method]["operationId"]


def _link(doc: dict, method: str, path: str, **parameters: str) -> dict[str, Any]:
    return {"operationId": _operation_id(doc, method, path), "parameters": parameters}


def _valid_bodies(image_id: str, catalog_id: str, plan: str) -> dict[str, dict[str, Any]]:
    """A body each create accepts, with the tenant's real ids."""
    return {"/v1/generations": {"prompt": "A lamp on a desk, slow pan", "image_asset_id": image_id, "duration_s": 1},
            "/v1/imports": {"asset_id": catalog_id, "plan": plan},
            "/v1/uploads": {"filename": "shop.csv", "size": 3, "content_type": "text/csv",
                            "sha256": hashlib.sha256(b"a,b").hexdigest()}}


def _linked(doc: dict, bodies: dict[str, dict[str, Any]]) -> dict:
    """The document with links from each create to what takes its id, and a valid body with the
    tenant's real ids among the bodies a create may be generated with (anyOf: valid or generated)."""
    doc = copy.deepcopy(doc)
    generation, imports = "/v1/generations/{generation_id}", "/v1/imports/{import_id}"
    links = {
        ("post", "/v1/generations", "202"): {
            "read": _link(doc, "get", generation, generation_id="$response.body#/id"),
            "cancel": _link(doc, "post", generation + "/cancel", generation_id="$response.body#/id"),
            "list": _link(doc, "get", "/v1/generations", import_id="$response.body#/import_id"),
            "events": _link(doc, "get", "/v1/events", task_id="$response.body#/id"),
        },
        ("post", "/v1/imports", "201"): {
            "read": _link(doc, "get", imports, import_id="$response.body#/import_id"),
            "run": _link(doc, "post", imports + "/run", import_id="$response.body#/import_id"),
            "cancel": _link(doc, "post", imports + "/cancel", import_id="$response.body#/import_id"),
            "export": _link(doc, "get", imports + "/export", import_id="$response.body#/import_id"),
            "list": _link(doc, "get", "/v1/generations", import_id="$response.body#/import_id"),
            "events": _link(doc, "get", "/v1/events", import_id="$response.body#/import_id"),
        },
        ("post", "/v1/uploads", "201"): {
            "complete": _link(doc, "post", "/v1/uploads/{asset_id}/complete", asset_id="$response.body#/id"),
            "read": _link(doc, "get", "/v1/assets/{asset_id}", asset_id="$response.body#/id"),
        },
    }
    for (method, path, status), found in links.items():
        doc["paths"][path][method]["responses"][status]["links"] = found
    for path, body in bodies.items():
        content = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        content["schema"] = {"anyOf": [{"const": body}, content["schema"]]}
    for parameter in doc["paths"]["/v1/generations"]["post"]["parameters"]:
        if parameter["name"] == "Idempotency-Key":  # mostly usable keys, a new one each time
            parameter["required"] = True
            parameter["schema"] = {"anyOf": [{"type": "string", "pattern": "^[a-z0-9]{12}$"}, parameter["schema"]]}
    return doc


def _hostile(case: Any, where: str, value: str) -> None:
    """Put `value` into the case's first path parameter or a query parameter (a URL cannot carry a
    lone surrogate: replaced); a body's is put in after serialising (`_hostile_body`)."""
    value = value.encode("utf-8", "replace").decode()
    if where == "path" and case.path_parameters:
        case.path_parameters[next(iter(case.path_parameters))] = value
    elif where == "query":
        params = case.operation.query
        name = next(iter(params)).name if params else "x"
        case.query = {**(case.query or {}), name: value}


def _hostile_body(kwargs: dict[str, Any], where: str, value: str) -> None:
    """`value` as the first field of a JSON body (a copy: the valid bodies are shared)."""
    body = kwargs.get("json")
    if where == "body" and isinstance(body, dict):
        kwargs["json"] = {**body, next(iter(body), "x"): value}


def _ready_inputs(stack, api: ReelqueueClient, tenant_id: str) -> tuple[str, str]:
    """A READY image and a READY one-product catalog whose image is that image (its presigned URL)."""
    image = upload(api, PNG, "lamp.png", "image/png")
    with Database(stack.database_url).transaction() as session:
        key = ready_asset(session, tenant_id, image.id).key
    url = ObjectStorage.from_settings(stack).presigned_url(key)
    csv = f"product_id,title,description,image_url,price,currency,category\nF-1,Lamp,A lamp,{url},9.99,USD,Home\n"
    catalog = upload(api, csv.encode(), "shop.csv", "text/csv")
    assert (image.status, catalog.status) == ("READY", "READY"), (image.reason, catalog.reason)
    return image.id, catalog.id


def _end_open_tasks(url: str, key: str, db: Database, tenant_id: str, timeout_s: float = 180) -> None:
    """Cancel what the run left open and wait for every task to end while the worker still runs
    (so the suite's ledger check finds every reservation closed)."""
    api = ReelqueueClient(url, key)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with db.transaction() as session:
            open_ids = list(session.scalars(select(Task.id).where(
                Task.tenant_id == tenant_id, Task.status.not_in([s.value for s in TERMINAL]))))
        if not open_ids:
            return
        for task_id in open_ids:
            api.http.post(f"/v1/generations/{task_id}/cancel", headers=api.headers)
        time.sleep(1)
    pytest.fail(f"tasks still open after the fuzz run: {open_ids}")


@pytest.mark.timeout(1200)
async def test_generated_requests_never_answer_5xx(stack, task_queue, tmp_path, monkeypatch) -> None:
    """The requests go from a thread: the worker runs on this test's event loop meanwhile."""
    await asyncio.to_thread(_fuzz, stack, task_queue, tmp_path, monkeypatch)


def _fuzz(stack, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("REELQUEUE_FETCH_ALLOWED_HOSTS", json.dumps([stack.s3_endpoint]))  # the importer's
    db = Database(stack.database_url)
    tenant_id = f"fuzz-{uuid.uuid4().hex[:8]}"
    with db.transaction() as session:  # a few real jobs' worth of credit; 2 running at a time
        key = tenants.create_tenant(session, tenant_id, tenants.TenantLimits(
            credits=Decimal(20), rate_per_minute=1_000_000, max_concurrent=2)).api_key
    statuses: Counter[int] = Counter()
    with api_server(stack, task_queue) as url, httpx.Client(base_url=url, timeout=30) as http:
        auth = {"Authorization": f"Bearer {key}"}
        image_id, catalog_id = _ready_inputs(stack, ReelqueueClient(url, key), tenant_id)
        plan = make_plan(tmp_path, duration_s=2).read_text()
        doc = http.get("/openapi.json").json()

        def send(case: Any, where: str = "", value: str = "") -> None:
            kwargs = case.as_transport_kwargs(base_url=url)
            _hostile_body(kwargs, where, value)
            headers = {**(kwargs.pop("headers", None) or {}), **auth}
            headers.pop("Accept", None)  # never ask for the event stream: it lasts minutes
            target = quote(kwargs.pop("url"), safe=URL_SAFE)  # control characters in a path, percent-encoded
            if "json" in kwargs:  # a lone surrogate has no UTF-8 form: sent as a JSON escape
                kwargs["content"] = json.dumps(kwargs.pop("json")).encode()
                headers["Content-Type"] = "application/json"
            response = http.request(kwargs.pop("method"), target, headers=headers,
                                    **{k: v for k, v in kwargs.items() if k in ("params", "content", "json", "data")})
            statuses[response.status_code] += 1
            assert response.status_code < 500, (case.method, case.path, case.path_parameters, case.query,
                                                 case.body, response.status_code, response.text)

        bodies = _valid_bodies(image_id, catalog_id, plan)
        began = time.monotonic()
        schema = schemathesis.openapi.from_dict(_linked(doc, bodies)).include(path_regex="^/v1/")
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 12
        for operation in operations:
            @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                      suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
            @given(case=operation.as_strategy(), where=st.sampled_from(["", "", "path", "query", "body"]),
                   value=st.sampled_from(HOSTILE))
            def call(case: Any, where: str, value: str) -> None:
                _hostile(case, where, value)
                send(case, where, value)

            call()
        # and every operation with each of SWEEP in each place, at least once (one create, then replays)
        key_of = {"path": "sweep", "query": "sweep", "body": uuid.uuid4().hex}
        for operation in operations:
            for where in ("path", "query", "body"):
                for value in SWEEP:
                    body = bodies.get(operation.path) if operation.method.upper() == "POST" else None
                    extra = {"body": body, "media_type": "application/json"} if body or operation.body else {}
                    case = operation.Case(path_parameters={p.name: "x" for p in operation.path_parameters},
                                          headers={"Idempotency-Key": key_of[where]}, **extra)
                    if "body" in extra and extra["body"] is None:
                        case.body = {"x": "y"}
                    _hostile(case, where, value)
                    send(case, where, value)
        per_operation, times = sum(statuses.values()), [time.monotonic() - began]

        session = requests.Session()

        class Linked(schema.as_state_machine()):  # type: ignore[misc]
            def call(self, case: Any, **kwargs: Any) -> Any:
                headers = {**(case.headers or {}), **auth}
                headers.pop("Accept", None)
                case.headers = headers
                return case.call(base_url=url, session=session, **kwargs)

            def after_call(self, response: Any, case: Any) -> None:
                statuses[response.status_code] += 1
                assert response.status_code < 500, (case.method, case.path, case.body, response.status_code,
                                                     response.text)

            def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
                """Only the 5xx rule (after_call) is this test's: the rest is the contract tests' job."""

        Linked.run(settings=settings(max_examples=SCENARIOS, stateful_step_count=STEPS, derandomize=True,
                                     database=None, deadline=None, suppress_health_check=list(HealthCheck)))
        times.append(time.monotonic() - began - times[0])
        _end_open_tasks(url, key, db, tenant_id)
        times.append(time.monotonic() - began - sum(times))
    total = sum(statuses.values())
    print(f"fuzz: {total} requests ({per_operation} per operation, {total - per_operation} stateful), "
          f"statuses {dict(sorted(statuses.items()))}; seconds per part, stateful, cleanup "
          f"{', '.join(f'{t:.0f}' for t in times)}")
    with db.transaction() as session:
        reached = Counter(session.scalars(select(Task.status).where(Task.tenant_id == tenant_id)))
    print(f"fuzz: tasks created {dict(reached)}")
    assert per_operation >= len(operations) * min(EXAMPLES, 10)
    assert statuses[202] + statuses[201] > 0 and sum(reached.values()) > 0  # creates reached their real paths


# Issue 44: what a schema cannot generate. A cursor is valid base64 of hostile JSON; a plan's TOML
# escapes write any character into any of its texts; a catalog holds values at and past each column.
CRAFTED_IDS = ["\\u0000", "\\ud800", "\\u001b[2J", "\\u202e", "", "a" * 65, "' OR 1=1 --", "0" * 32]
CRAFTED_TIMES = ["2020-01-01T00:00:00", "2026-01-01T00:00:00+00:00", "0001-01-01T00:00:00+00:00",
                 "9999-12-31T23:59:59+14:00", "2026-13-01", "x"]
PLAN_TEXTS = [('name = "t"', 'name = "{}"'), ('id = "tpl"', 'id = "{}"'), ('version = "tpl-v1"', 'version = "{}"'),
              ("Product shot", "{}"), ('"en-US" = "Product', '"{}" = "Product'), ('"Hook en-US"', '"{}"'),
              ('id = "a"', 'id = "{}"')]
TOML_ESCAPES = ["\\u0000", "\\u0007", "\\u0008", "\\u001b[41m", "\\u007f", "\\u0085", "\\u009b", "\\u202e", "\\u2066",
                "\\u200b", "\\U0010ffff", "\\ud800", "x" * 301]
COLUMN_VALUES = {  # catalog column: values at and past what its table takes
    "product_id": ["P" * 300, "P" * 301, "P" * 5000],
    "price": ["99999999999999.999999", "100000000000000", "1E+400", "-99999999999999.9", "0.0000001"],
    "currency": ["USD", "USDX", "€" * 9],
    "title": ["T" * 80, "T" * 81, "T" * 100_000],
    "category": ["C" * 10_000],
}


@pytest.mark.timeout(600)
def test_crafted_cursors_plans_and_catalogs_never_answer_5xx(stack, tmp_path) -> None:
    db = Database(stack.database_url)
    tenant_id = f"fuzz-{uuid.uuid4().hex[:8]}"
    with db.transaction() as session:
        key = tenants.create_tenant(session, tenant_id, tenants.TenantLimits(
            credits=Decimal(0), rate_per_minute=1_000_000, max_concurrent=1)).api_key
    plan = make_plan(tmp_path).read_text()
    statuses: Counter[int] = Counter()
    with api_server(stack) as url, httpx.Client(base_url=url, timeout=30,
                                               headers={"Authorization": f"Bearer {key}"}) as http:
        api = ReelqueueClient(url, key)
        head = "product_id,title,description,image_url,price,currency,category\n"
        catalog = upload(api, f"{head}F-1,Lamp,A lamp,https://example.com/a.png,1,USD,Home\n".encode(), "shop.csv",
                         "text/csv").id

        def check(response: httpx.Response, what: object) -> None:
            statuses[response.status_code] += 1
            assert response.status_code < 500, (what, response.status_code, response.text)

        @settings(max_examples=60, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(at=st.sampled_from(CRAFTED_TIMES),  # a task id as JSON string content: crafted escapes, or any text
               task=st.sampled_from(CRAFTED_IDS) | st.text(max_size=70).map(lambda t: json.dumps(t)[1:-1]),
               shape=st.sampled_from(['["{at}","{task}"]', '["{at}","{task}",1]', '{{"a":"{task}"}}', '["{task}"]']))
        def cursor(at: str, task: str, shape: str) -> None:
            raw = shape.format(at=at, task=task).encode()
            encoded = base64.urlsafe_b64encode(raw).decode().rstrip("=")
            check(http.get("/v1/generations", params={"cursor": encoded}), raw)

        @settings(max_examples=40, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(where=st.sampled_from(PLAN_TEXTS), escape=st.sampled_from(TOML_ESCAPES))
        def toml(where: tuple[str, str], escape: str) -> None:
            text = plan.replace(where[0], where[1].format(escape), 1)
            body = {"asset_id": catalog, "plan": text, "check_urls": False}
            check(http.post("/v1/imports", json=body), (where, escape))

        @settings(max_examples=12, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(values=st.fixed_dictionaries({k: st.sampled_from(v) for k, v in COLUMN_VALUES.items()}),
               name=st.sampled_from(["c.csv", "c" * 246 + ".csv", "c" * 196 + ".csv"]))
        def columns(values: dict[str, str], name: str) -> None:
            row = {"product_id": "F-1", "title": "Lamp", "description": "A lamp",
                   "image_url": "https://example.com/a.png", "price": "1", "currency": "USD", "category": "Home",
                   **values}
            line = ",".join(row[c] for c in head.strip().split(","))
            asset = upload(api, (head + line + "\n").encode(), name, "text/csv")
            check(http.post("/v1/imports", json={"asset_id": asset.id, "plan": plan, "check_urls": False}),
                  (values, name))

        failed = []
        for part in (cursor, toml, columns):  # each part runs, whatever the one before found
            try:
                part()
            except Exception as exc:  # noqa: BLE001 - a 5xx, or the connection it dropped (hypothesis: flaky)
                failed.append(f"{part.__name__}: {type(exc).__name__}: {str(exc)[:300]}")
    print(f"crafted: statuses {dict(sorted(statuses.items()))}")
    assert not failed, "\n".join(failed)
    assert statuses[400] > 0 and statuses[422] > 0 and statuses[201] > 0
