"""Best-effort webhook delivery on a background thread (Standard Webhooks signatures).

One thread keeps a job's events in order; failed deliveries are retried a few times with
backoff and then dropped: delivery never affects the job, as with real providers.
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid

import httpx

from emulator.signing import webhook_headers
from emulator.stats import StatsBoard

log = logging.getLogger("emulator.webhooks")
_BACKOFF_S = (0.5, 2.0, 5.0, 10.0)


class WebhookSender:
    def __init__(
        self,
        secret: str,
        *,
        attempts: int = 4,
        timeout_s: float = 5.0,
        max_pending: int = 1000,
        stats: StatsBoard | None = None,
    ):
        self._secret = secret
        self._stats = stats or StatsBoard()
        self._attempts = attempts
        self._timeout_s = timeout_s
        self._pending: queue.Queue[tuple[str, bytes]] = queue.Queue(maxsize=max_pending)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="emulator-webhooks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def send(self, url: str, body: bytes) -> None:
        try:
            self._pending.put_nowait((url, body))
        except queue.Full:
            log.warning("webhook queue full, dropping an event for %s", url)
            self._stats.add("webhooks_dropped")

    def _loop(self) -> None:
        with httpx.Client(timeout=self._timeout_s) as client:
            while not self._stop.is_set():
                try:
                    url, body = self._pending.get(timeout=0.2)
                except queue.Empty:
                    continue
                self._deliver(client, url, body)

    def _deliver(self, client: httpx.Client, url: str, body: bytes) -> None:
        msg_id = f"msg_{uuid.uuid4().hex}"  # one id across retries: receivers dedupe on it
        for attempt in range(self._attempts):
            headers = {"content-type": "application/json", **webhook_headers(self._secret, msg_id, body)}
            try:
                if client.post(url, content=body, headers=headers).is_success:
                    self._stats.add("webhooks_sent")
                    return
            except httpx.HTTPError as exc:
                log.info("webhook to %s failed: %s", url, exc)
            last = attempt + 1 == self._attempts
            if not last and self._stop.wait(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]):
                return
        log.warning("webhook to %s dropped after %d attempts", url, self._attempts)
        self._stats.add("webhooks_dropped")
