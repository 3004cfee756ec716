"""The client and the models it speaks (the server's answers, validated on arrival)."""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


class ApiProblem(Exception):
    """A problem+json answer: `type` is stable per case (urn:reelqueue:problem:<slug>)."""

    def __init__(self, status: int, problem: dict[str, Any], headers: httpx.Headers):
        self.status = status
        self.type = str(problem.get("type", "about:blank"))
        self.title = str(problem.get("title", ""))
        self.detail = problem.get("detail")
        self.headers = headers
        super().__init__(f"{status} {self.type}: {self.detail or self.title}")

    @property
    def slug(self) -> str:
        return self.type.rsplit(":", 1)[-1]


class Account(BaseModel):
    tenant_id: str
    key_id: str
    credit_limit: float
    credit_available: float
    max_concurrent: int | None
    rate_per_minute: int


class GenerationRequest(BaseModel):
    prompt: str
    image_asset_id: str
    provider: str = "emulator"
    model: str = "emu-motion-1"
    duration_s: float = 2.0
    aspect_ratio: str = "9:16"
    fallbacks: list[dict[str, str]] | None = None  # [{"provider": ..., "model": ...}]: routes after the primary
    lock_model: bool = False  # true: no route but the primary
    priority: str = "interactive"  # or "bulk": behind the tenant's interactive generations


class GenerationAsset(BaseModel):
    kind: str
    url: str
    mime: str | None = None


class Generation(BaseModel):
    id: str
    status: str
    attempts: int = 0
    cost: float | None = None
    estimated_cost: float | None = None
    prompt: str | None = None
    provider: str | None = None
    model: str | None = None
    duration_s: float | None = None
    aspect_ratio: str | None = None
    import_id: str | None = None
    error: str | None = None
    created_at: str | None = None
    assets: list[GenerationAsset] = []
    route_note: str | None = None  # the route of its latest attempt, and why others were skipped


class GenerationPage(BaseModel):
    items: list[Generation]
    next_cursor: str | None = None


class ReelqueueClient:
    """`http` may be given (a TestClient, or an httpx.Client with its own transport); otherwise
    one is made for `base_url` and closed with the client."""

    def __init__(self, base_url: str, api_key: str, *, http: httpx.Client | None = None, timeout_s: float = 30.0):
        self._own = http is None
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout_s)
        self.headers = {"Authorization": f"Bearer {api_key}"}

    def __enter__(self) -> ReelqueueClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The raw response of a successful call; ApiProblem for any 4xx/5xx."""
        headers = {**self.headers, **kwargs.pop("headers", {})}
        response = self.http.request(method, path, headers=headers, **kwargs)
        if response.status_code >= 400:
            try:
                problem = response.json()
            except ValueError:
                problem = {"title": response.reason_phrase, "detail": response.text[:200]}
            raise ApiProblem(response.status_code, problem, response.headers)
        return response

    def _get(self, model: type[M], path: str, **params: Any) -> M:
        clean = {k: v for k, v in params.items() if v is not None}
        return model.model_validate(self.request("GET", path, params=clean).json())

    def me(self) -> Account:
        return self._get(Account, "/v1/me")

    def create_generation(self, body: GenerationRequest, *, idempotency_key: str | None = None) -> Generation:
        """202 (or the first answer again for a repeated key); a fresh key per call unless given."""
        key = idempotency_key or uuid.uuid4().hex
        response = self.request("POST", "/v1/generations", json=body.model_dump(mode="json"),
                                headers={"Idempotency-Key": key})
        return Generation.model_validate(response.json())

    def get_generation(self, generation_id: str) -> Generation:
        return self._get(Generation, f"/v1/generations/{generation_id}")

    def list_generations(self, *, status: str | None = None, import_id: str | None = None,
                         cursor: str | None = None, limit: int | None = None) -> GenerationPage:
        return self._get(GenerationPage, "/v1/generations", status=status, import_id=import_id, cursor=cursor,
                         limit=limit)

    def cancel_generation(self, generation_id: str) -> Generation:
        return Generation.model_validate(self.request("POST", f"/v1/generations/{generation_id}/cancel").json())
