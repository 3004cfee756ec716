"""The emulator's webhook sender and its faults, over real HTTP to a recording receiver."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from adapters.providers.base import WebhookRejected
from adapters.webhooks import StandardWebhookVerifier
from emulator.config import new_webhook_secret
from emulator.faults import FaultBoard
from emulator.stats import StatsBoard
from emulator.webhooks import WebhookSender
from emulator.wire import Faults

SECRET = new_webhook_secret()


class Receiver:
    """Records every POST; answers `status`."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, str], bytes]] = []
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.calls.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self) -> list[dict]:
        return [json.loads(body) for _, body in self.calls]

    def wait_for(self, n: int, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.calls) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.calls) >= n, f"{len(self.calls)} of {n} deliveries"


def wait_until(condition, timeout_s: float = 10.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert condition()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    yield rec
    rec.server.shutdown()


@pytest.fixture
def sender() -> Iterator[tuple[WebhookSender, FaultBoard, StatsBoard]]:
    faults, stats = FaultBoard(), StatsBoard()
    webhook_sender = WebhookSender(SECRET, stats=stats, faults=faults, attempts=2, hold_s=0.5)
    webhook_sender.start()
    yield webhook_sender, faults, stats
    webhook_sender.stop()


def event(job: str, n: int) -> bytes:
    return json.dumps({"id": job, "n": n}).encode()


def verify(headers: dict[str, str], body: bytes) -> None:
    StandardWebhookVerifier(SECRET).verify(headers, body)


def test_events_go_out_in_order_and_signed(sender, receiver: Receiver) -> None:  # noqa: ANN001
    send, _, stats = sender
    for n in range(3):
        send.send(receiver.url, event("job_a", n), job_id="job_a")
    receiver.wait_for(3)
    assert [b["n"] for b in receiver.bodies()] == [0, 1, 2]  # one job's events in order
    for headers, body in receiver.calls:
        verify(headers, body)
    assert len({h["webhook-id"] for h, _ in receiver.calls}) == 3
    wait_until(lambda: stats.snapshot().webhooks_sent == 3)  # counted once the answer is back


def test_duplicate_sends_the_same_delivery_twice(sender, receiver: Receiver) -> None:  # noqa: ANN001
    send, faults, stats = sender
    faults.update(Faults(duplicate_webhook=1))
    send.send(receiver.url, event("job_d", 0), job_id="job_d")
    send.send(receiver.url, event("job_d", 1), job_id="job_d")
    receiver.wait_for(3)
    ids = [h["webhook-id"] for h, _ in receiver.calls]
    assert ids[0] == ids[1] != ids[2] and [b["n"] for b in receiver.bodies()] == [0, 0, 1]
    assert stats.snapshot().webhooks_duplicated == 1


def test_reorder_holds_an_event_until_the_jobs_next_one(sender, receiver: Receiver) -> None:  # noqa: ANN001
    send, faults, stats = sender
    faults.update(Faults(reorder_webhooks=1))
    send.send(receiver.url, event("job_r", 0), job_id="job_r")
    send.send(receiver.url, event("job_other", 0), job_id="job_other")  # another job passes
    send.send(receiver.url, event("job_r", 1), job_id="job_r")
    receiver.wait_for(3)
    assert [b["n"] for b in receiver.bodies() if b["id"] == "job_r"] == [1, 0]  # order kept per job only
    assert stats.snapshot().webhooks_reordered == 1


def test_a_held_event_without_a_follower_goes_out_after_the_hold(sender, receiver: Receiver) -> None:  # noqa: ANN001
    send, faults, _ = sender
    faults.update(Faults(reorder_webhooks=1))
    send.send(receiver.url, event("job_last", 0), job_id="job_last")
    receiver.wait_for(1, timeout_s=5)


def test_drops_bad_signatures_and_stale_timestamps(sender, receiver: Receiver) -> None:  # noqa: ANN001
    send, faults, stats = sender
    for n, fault in enumerate([Faults(drop_webhook=1), Faults(bad_signature=1), Faults(stale_timestamp=1), None]):
        if fault is not None:  # one at a time: faults pending together all apply to the next event
            faults.update(fault)
        send.send(receiver.url, event("job_f", n), job_id="job_f")
    receiver.wait_for(3)
    (bad_h, bad_b), (stale_h, stale_b), (ok_h, ok_b) = receiver.calls
    with pytest.raises(WebhookRejected, match="no valid signature"):
        verify(bad_h, bad_b)
    with pytest.raises(WebhookRejected, match="too old"):
        verify(stale_h, stale_b)
    assert time.time() - int(stale_h["webhook-timestamp"]) >= 590
    verify(ok_h, ok_b)
    seen = stats.snapshot()
    assert (seen.webhooks_dropped_injected, seen.webhooks_bad_signature, seen.webhooks_stale) == (1, 1, 1)


def test_drop_all_holds_while_set(sender, receiver: Receiver) -> None:  # noqa: ANN001
    send, faults, stats = sender
    faults.update(Faults(drop_all_webhooks=True))
    send.send(receiver.url, event("job_x", 0), job_id="job_x")
    faults.update(Faults(drop_all_webhooks=False))
    send.send(receiver.url, event("job_x", 1), job_id="job_x")
    receiver.wait_for(1)
    time.sleep(0.3)
    assert [b["n"] for b in receiver.bodies()] == [1] and stats.snapshot().webhooks_dropped_injected == 1


def test_send_now_delivers_before_returning(sender, receiver: Receiver) -> None:  # noqa: ANN001
    send, _, stats = sender
    send.send_now(receiver.url, event("job_now", 0), job_id="job_now")
    assert len(receiver.calls) == 1  # no waiting: it is there when send_now returns
    verify(*receiver.calls[0])
    assert stats.snapshot().webhooks_before_response == 1


def test_a_refusal_is_not_retried(sender, receiver: Receiver) -> None:  # noqa: ANN001
    send, _, stats = sender
    receiver.status = 401
    send.send(receiver.url, event("job_no", 0), job_id="job_no")
    receiver.wait_for(1)
    time.sleep(0.8)  # a retry would come after 0.5 s
    assert len(receiver.calls) == 1 and stats.snapshot().webhooks_refused == 1
