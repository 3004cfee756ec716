"""A long answer stops once its key is revoked: `while_live` asks at most every `every_s` as chunks
go out, and sends nothing after a "no"."""

from __future__ import annotations

import itertools
import time

from gateway.tenancy import while_live


def test_chunks_stop_at_the_first_check_after_revocation() -> None:
    asked: list[float] = []
    revoked_at = time.monotonic() + 0.05

    def live() -> bool:
        asked.append(time.monotonic())
        return time.monotonic() < revoked_at

    def slow_chunks():  # noqa: ANN202 - endless, one chunk per millisecond
        for n in itertools.count():
            time.sleep(0.001)
            yield n

    sent = list(while_live(slow_chunks(), live, every_s=0.01))
    assert asked and asked[-1] >= revoked_at  # it stopped at the first check that saw the revocation
    assert all(b - a >= 0.01 for a, b in itertools.pairwise(asked))  # asked at most every 10 ms
    assert time.monotonic() - revoked_at < 5.0 and len(sent) > 10


def test_a_live_key_gets_every_chunk() -> None:
    assert list(while_live(range(5), lambda: True, every_s=0.0)) == [0, 1, 2, 3, 4]
