"""reelqueue_credit_spent_total (the dashboard's spend rate): what a ledger step charged, counted by the
worker that wrote the rows, never twice for one business key."""

from __future__ import annotations

from decimal import Decimal

import pytest
from prometheus_client import REGISTRY

from activities.ledger import _Entry, _TaskLedger


class _Session:
    """Answers the insert's RETURNING with the keys the database took: all but those already stored."""

    def __init__(self, entries: list[_Entry], stored: set[str]):
        self.taken = [e.key for e in entries if e.key not in stored]

    def scalars(self, statement):  # noqa: ANN001, ANN201 - the INSERT ... RETURNING business_key
        return type("Rows", (), {"all": lambda _rows: self.taken})()


def _spent(tenant: str) -> float:
    return REGISTRY.get_sample_value("reelqueue_credit_spent_total", {"tenant": tenant}) or 0.0


def test_settle_and_adjustment_count_as_spending_once_per_business_key() -> None:
    ledger = _TaskLedger("t1", 0, "tenant-spend", Decimal(5))
    before = _spent("tenant-spend")
    settle = [_Entry("SETTLE", Decimal("3.5"), "settle:t1", 1), _Entry("RELEASE", Decimal("1.5"), "release:t1", 1),
              _Entry("ADJUSTMENT", Decimal("0.25"), "adjustment:t1:1", 1)]
    ledger.append(_Session(settle, set()), settle)  # type: ignore[arg-type]
    assert _spent("tenant-spend") - before == 3.75
    ledger.append(_Session(settle, set()), settle)  # the step ran again: the ledger holds these keys
    assert _spent("tenant-spend") - before == 3.75


def test_rows_a_concurrent_run_of_the_step_wrote_are_not_counted_here(monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = _TaskLedger("t2", 0, "tenant-race", Decimal(5))
    entries = [_Entry("SETTLE", Decimal(2), "settle:t2", 1)]
    stored = _TaskLedger("t2", 0, "tenant-race", Decimal(5), {"settle:t2": ("SETTLE", Decimal(2))})
    monkeypatch.setattr(_TaskLedger, "read", classmethod(lambda cls, session, task_id, run: stored))
    before = _spent("tenant-race")
    ledger.append(_Session(entries, {"settle:t2"}), entries)  # type: ignore[arg-type]
    assert _spent("tenant-race") == before and ledger.entries == stored.entries
