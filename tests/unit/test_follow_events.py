"""`reelqueue_client.transfer.follow` after its gateway went away: a dropped connection and a 429
(the tenant's streams still counted on the dead gateway for a few seconds) are waited out, and it
resumes with the last id it saw."""

from __future__ import annotations

import httpx

from reelqueue_client import ReelqueueClient
from reelqueue_client.transfer import follow

EVENT = ('{"event_id": %d, "task_id": "t", "import_id": "i", "event": "queued", "from_status": "A", '
         '"to_status": "B", "version": 1, "attempt_no": null, "at": "2026-12-07T00:00:00+00:00"}')


def test_follow_waits_out_a_429_and_resumes_from_its_last_id() -> None:
    asked: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("last-event-id"))
        if len(asked) in (2, 3):  # the first gateway died; the other still counts its streams (asked twice:
            # the stream, then its JSON form for the problem)
            return httpx.Response(429, headers={"Retry-After": "0", "Content-Type": "application/problem+json"},
                                  json={"type": "urn:reelqueue:problem:too-many-streams", "title": "Too Many"})
        n = len(asked)
        body = f"retry: 1000\n\nid: cursor-{n}\nevent: state\ndata: {EVENT % n}\n\n"
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, text=body)

    http = httpx.Client(base_url="http://gateway", transport=httpx.MockTransport(answer))
    with ReelqueueClient("http://gateway", "rq_key", http=http) as api:
        stream = follow(api, import_id="i")
        first, second = next(stream), next(stream)
    assert (first.event_id, second.event_id) == (1, 4)
    assert asked == [None, "cursor-1", "cursor-1", "cursor-1"]
