"""Best-effort webhook delivery on a background thread (Standard Webhooks signatures), with the
webhook faults of /_sim/faults.

Delivery threads each own the jobs that hash to them, so one job's events go out in order while
slow deliveries of other jobs go on in parallel. A delivery that fails is retried a few times with
backoff and then dropped: delivery never affects the job, as with real providers. A 4xx answer (other than
408 and 429) is final: the receiver refused that event, and sending it again would change nothing.
Faults are decided when an event is produced (`send`), so "the next N events" means the next N
status changes, whatever the delivery thread is busy with.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, replace
from enum import Enum

import httpx

from emulator.config import new_webhook_secret
from emulator.faults import FaultBoard
from emulator.signing import webhook_headers
from emulator.stats import StatsBoard

log = logging.getLogger("emulator.webhooks")
_BACKOFF_S = (0.5, 2.0, 5.0, 10.0)
STALE_S = 600  # the stale_timestamp fault: signed 10 minutes ago
HOLD_S = 10.0  # a reordered event goes out after the job's next one, or after this long


@dataclass(frozen=True)
class _Event:
    url: str
    body: bytes
    job_id: str
    msg_id: str  # one id across retries and copies: receivers dedupe on it
    copies: int = 1
    bad_signature: bool = False
    stale: bool = False


class _Answer(Enum):
    DONE = "done"
    REFUSED = "refused"
    RETRY = "retry"


class WebhookSender:
    def __init__(
        self,
        secret: str,
        *,
        attempts: int = 4,
        timeout_s: float = 5.0,
        max_pending: int = 1000,
        stats: StatsBoard | None = None,
        faults: FaultBoard | None = None,
        hold_s: float = HOLD_S,
        threads: int = 4,
    ):
        self._secret = secret
        self._wrong_secret = new_webhook_secret()  # the bad_signature fault signs with this
        self._stats = stats or StatsBoard()
        self._faults = faults or FaultBoard()
        self._attempts = attempts
        self._timeout_s = timeout_s
        self._hold_s = hold_s
        self._queues: list[queue.Queue[_Event]] = [queue.Queue(maxsize=max_pending) for _ in range(threads)]
        self._held: dict[str, tuple[_Event, float]] = {}  # job id -> (held event, release time)
        self._held_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(q,), name=f"emulator-webhooks-{i}", daemon=True)
            for i, q in enumerate(self._queues)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))

    def send(self, url: str, body: bytes, *, job_id: str, dialect: str | None = None) -> None:
        """Queue one event of `job_id` (a job of `dialect`, whose faults it takes) for the delivery thread."""
        event = self._prepare(url, body, job_id, dialect)
        if event is None:
            return
        with self._held_lock:
            held = self._held.pop(job_id, None)
            if held is None and self._faults.take("reorder_webhooks", dialect):
                self._held[job_id] = (event, time.monotonic() + self._hold_s)
                self._stats.add("webhooks_reordered")
                return
        self._enqueue(event)
        if held is not None:
            self._enqueue(held[0])

    def send_now(self, url: str, body: bytes, *, job_id: str, dialect: str | None = None) -> None:
        """Deliver in the caller's thread, once (the webhook_before_response fault); what is left
        (a failed delivery, a second copy) goes to the delivery thread."""
        event = self._prepare(url, body, job_id, dialect)
        if event is None:
            return
        self._stats.add("webhooks_before_response")
        with httpx.Client(timeout=self._timeout_s) as client:
            answer = self._post(client, event)
        if answer is _Answer.RETRY:
            self._enqueue(event)
        elif event.copies > 1:
            self._enqueue(replace(event, copies=event.copies - 1))

    def _prepare(self, url: str, body: bytes, job_id: str, dialect: str | None) -> _Event | None:
        """The event with the faults it takes; None when a fault drops it."""
        faults, stats = self._faults, self._stats
        if faults.flag("drop_all_webhooks", dialect) or faults.take("drop_webhook", dialect):
            stats.add("webhooks_dropped_injected")
            return None
        event = _Event(url=url, body=body, job_id=job_id, msg_id=f"msg_{uuid.uuid4().hex}")
        if faults.take("bad_signature", dialect):
            event = replace(event, bad_signature=True)
            stats.add("webhooks_bad_signature")
        if faults.take("stale_timestamp", dialect):
            event = replace(event, stale=True)
            stats.add("webhooks_stale")
        if faults.take("duplicate_webhook", dialect):
            event = replace(event, copies=2)
            stats.add("webhooks_duplicated")
        return event

    def _enqueue(self, event: _Event) -> None:
        pending = self._queues[hash(event.job_id) % len(self._queues)]  # a job always goes to one thread
        try:
            pending.put_nowait(event)
        except queue.Full:
            log.warning("webhook queue full, dropping an event for %s", event.url)
            self._stats.add("webhooks_dropped")

    def _release_due(self) -> None:
        """Held events whose job sent nothing more in time go out on their own."""
        now = time.monotonic()
        with self._held_lock:
            due = [job for job, (_, until) in self._held.items() if until <= now]
            released = [self._held.pop(job)[0] for job in due]
        for event in released:
            self._enqueue(event)

    def _loop(self, pending: queue.Queue[_Event]) -> None:
        with httpx.Client(timeout=self._timeout_s) as client:
            while not self._stop.is_set():
                self._release_due()
                try:
                    event = pending.get(timeout=0.2)
                except queue.Empty:
                    continue
                for _ in range(event.copies):
                    if not self._deliver(client, event):
                        break

    def _deliver(self, client: httpx.Client, event: _Event) -> bool:
        """One copy, retried with backoff; False if stopped meanwhile."""
        for attempt in range(self._attempts):
            if self._post(client, event) is not _Answer.RETRY:
                return True
            last = attempt + 1 == self._attempts
            if not last and self._stop.wait(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]):
                return False
        log.warning("webhook to %s dropped after %d attempts", event.url, self._attempts)
        self._stats.add("webhooks_dropped")
        return True

    def _post(self, client: httpx.Client, event: _Event) -> _Answer:
        """One POST, signed now (Standard Webhooks), or as the event's faults say."""
        secret = self._wrong_secret if event.bad_signature else self._secret
        ts = int(time.time()) - STALE_S if event.stale else None
        headers = {"content-type": "application/json", **webhook_headers(secret, event.msg_id, event.body, ts=ts)}
        try:
            resp = client.post(event.url, content=event.body, headers=headers)
        except httpx.HTTPError as exc:
            log.info("webhook to %s failed: %s", event.url, exc)
            return _Answer.RETRY
        if resp.is_success:
            self._stats.add("webhooks_sent")
            return _Answer.DONE
        if resp.is_client_error and resp.status_code not in (408, 429):
            log.info("webhook %s refused by %s: HTTP %d", event.msg_id, event.url, resp.status_code)
            self._stats.add("webhooks_refused")
            return _Answer.REFUSED
        return _Answer.RETRY
