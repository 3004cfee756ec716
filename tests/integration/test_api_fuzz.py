"""Schemathesis against the live gateway: requests generated from the /v1 OpenAPI document, as an
authenticated tenant, must never answer 5xx. Fixed seed and a small budget in the suite;
`REELQUEUE_FUZZ_EXAMPLES=400` (per operation) for a larger run on demand."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from decimal import Decimal

import httpx
import pytest
import schemathesis
from asgi_server import serving
from hypothesis import HealthCheck, Phase, given, settings

from adapters.providers import build_providers
from config.settings import Settings
from gateway.app import create_app
from gateway.deps import GatewayDeps
from schema import tenants
from schema.db import Database

EXAMPLES = int(os.environ.get("REELQUEUE_FUZZ_EXAMPLES", "25"))  # per operation


@pytest.mark.timeout(600)
def test_generated_requests_never_answer_5xx(stack: Settings) -> None:
    db = Database(stack.database_url)
    with db.transaction() as session:
        key = tenants.create_tenant(session, f"fuzz-{uuid.uuid4().hex[:8]}", tenants.TenantLimits(
            credits=Decimal(10), rate_per_minute=1_000_000)).api_key
    app = create_app(GatewayDeps(db=db, providers=build_providers(stack), signaler=None), settings=stack)
    schema = schemathesis.openapi.from_dict(app.openapi()).include(path_regex="^/v1/")
    statuses: Counter[int] = Counter()
    with serving(app) as port, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 5
        for operation in operations:
            @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                      suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
            @given(case=operation.as_strategy())
            def call(case) -> None:  # noqa: ANN001
                kwargs = case.as_transport_kwargs(base_url=str(http.base_url))
                headers = {**(kwargs.pop("headers", None) or {}), "Authorization": f"Bearer {key}"}
                response = http.request(kwargs.pop("method"), kwargs.pop("url"), headers=headers,
                                        **{k: v for k, v in kwargs.items() if k in ("params", "content", "json",
                                                                                    "data")})
                statuses[response.status_code] += 1
                assert response.status_code < 500, (case.method, case.path, response.status_code, response.text)

            call()
    print(f"fuzz: {sum(statuses.values())} requests, statuses {dict(sorted(statuses.items()))}")
    assert sum(statuses.values()) >= len(operations) * min(EXAMPLES, 10)
