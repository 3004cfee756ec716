"""A step's heartbeats start only once it has run QUIET_S: a short step sends none (each heartbeat that
reaches the server is a billable action), a longer one every time it beats from then on."""

from __future__ import annotations

from activities import heartbeats
from activities.heartbeats import QUIET_S, QuietHeartbeat


def test_a_step_shorter_than_the_quiet_time_sends_no_heartbeat_and_a_longer_one_does(monkeypatch):
    now = [100.0]
    sent = []
    monkeypatch.setattr(heartbeats.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(heartbeats.activity, "heartbeat", lambda *details: sent.append(details))
    beat = QuietHeartbeat()
    for step in (0.5, 1.0, QUIET_S - 0.1):
        now[0] = 100.0 + step
        beat({"out_time_s": step})
    assert sent == []
    now[0] = 100.0 + QUIET_S
    beat({"out_time_s": QUIET_S})
    now[0] += 1
    beat("checks")
    assert sent == [({"out_time_s": QUIET_S},), ("checks",)]
