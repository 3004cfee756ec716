"""Uploads and live status with the client: send a file through its presigned URL(s), and follow
`GET /v1/events` (Server-Sent Events) with resume.

    asset = upload(api, Path("shot.png").read_bytes(), "shot.png", "image/png")   # READY or REJECTED
    for event in follow(api, task_id=task.id):          # resumes with Last-Event-ID by itself
        print(event.to_status)
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
from pydantic import BaseModel

from reelqueue_client.client import ApiProblem, ReelqueueClient


class Asset(BaseModel):
    id: str
    status: str  # PENDING, VALIDATING, READY, REJECTED
    reason: str | None = None
    kind: str | None = None
    content_type: str | None = None
    size: int | None = None
    sha256: str | None = None
    width: int | None = None
    height: int | None = None
    duration_s: float | None = None


class StateEvent(BaseModel):
    id: str  # the stream position just after this event: send it back as Last-Event-ID
    event_id: int
    task_id: str
    import_id: str
    event: str
    from_status: str
    to_status: str
    version: int
    attempt_no: int | None = None
    at: str


def start_upload(api: ReelqueueClient, size: int, sha256: str, filename: str, content_type: str) -> dict[str, Any]:
    """`POST /v1/uploads`: the ticket (id, upload_url or parts, headers)."""
    body = {"filename": filename, "size": size, "content_type": content_type, "sha256": sha256}
    return api.request("POST", "/v1/uploads", json=body).json()


def send_bytes(ticket: dict[str, Any], data: bytes, *, timeout_s: float = 60.0) -> list[dict[str, Any]] | None:
    """PUT the bytes straight to object storage; for a multipart ticket, each part, returning the
    parts with their ETags (what complete checks)."""
    with httpx.Client(timeout=timeout_s) as s3:
        if ticket.get("upload_url"):
            s3.put(ticket["upload_url"], content=data, headers=ticket["headers"]).raise_for_status()
            return None
        parts = []
        for part in ticket["parts"]:
            start = (part["part_number"] - 1) * ticket["part_size"]
            sent = s3.put(part["url"], content=data[start:start + part["size"]])
            sent.raise_for_status()
            parts.append({"part_number": part["part_number"], "etag": sent.headers["etag"].strip('"')})
        return parts


def complete(api: ReelqueueClient, asset_id: str, parts: list[dict[str, Any]] | None = None) -> Asset:
    body = {"parts": parts} if parts else None
    return Asset.model_validate(api.request("POST", f"/v1/uploads/{asset_id}/complete", json=body).json())


def upload(api: ReelqueueClient, data: bytes, filename: str, content_type: str) -> Asset:
    """The whole flow for bytes in memory: declare, send, complete."""
    ticket = start_upload(api, len(data), hashlib.sha256(data).hexdigest(), filename, content_type)
    return complete(api, ticket["id"], send_bytes(ticket, data))


def get_asset(api: ReelqueueClient, asset_id: str) -> Asset:
    return Asset.model_validate(api.request("GET", f"/v1/assets/{asset_id}").json())


def events(api: ReelqueueClient, *, task_id: str | None = None, import_id: str | None = None,
           last_event_id: str | None = None, timeout_s: float = 60.0) -> Iterator[StateEvent]:
    """One connection of `GET /v1/events`: its state events until the server ends the stream."""
    params = {k: v for k, v in (("task_id", task_id), ("import_id", import_id)) if v}
    headers = {**api.headers, "Accept": "text/event-stream",
               **({"Last-Event-ID": last_event_id} if last_event_id else {})}
    with api.http.stream("GET", "/v1/events", params=params, headers=headers, timeout=timeout_s) as response:
        if response.status_code >= 400:
            response.read()
            api.request("GET", "/v1/events", params=params, headers=headers)  # raises its ApiProblem
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line:
                name, _, value = line.partition(":")
                fields[name] = value[1:] if value.startswith(" ") else value
                continue
            if "data" in fields and fields.get("event") == "state":
                yield StateEvent.model_validate({**json.loads(fields["data"]), "id": fields.get("id", "")})
            fields = {}


def follow(api: ReelqueueClient, *, task_id: str | None = None, import_id: str | None = None,
           last_event_id: str | None = None) -> Iterator[StateEvent]:
    """`events`, reconnecting with the last id seen whenever a stream ends or drops (forever: stop
    iterating when done). A 429 (the tenant's streams are all open, or a gateway that just died
    still counts its streams for a few seconds) is waited out as its Retry-After says."""
    while True:
        try:
            for event in events(api, task_id=task_id, import_id=import_id, last_event_id=last_event_id):
                last_event_id = event.id
                yield event
        except httpx.TransportError:
            time.sleep(0.5)  # the gateway is away: its load balancer sends the next try elsewhere
        except ApiProblem as problem:
            if problem.status != 429:
                raise
            time.sleep(float(problem.headers.get("retry-after", "1")))
