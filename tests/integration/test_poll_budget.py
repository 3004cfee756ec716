"""The polling budget on the real stack: status calls per provider per second held to
`polls_per_second` (REELQUEUE_PROVIDER_LIMITS) by one Postgres row every worker books its turn in.

The booking statement under concurrent callers, then 300 jobs running at once at the emulator,
followed without webhooks by two workers (each with its own Temporal connection, activities and
database pool, as two worker processes would have): the emulator's busiest whole second never
holds more status calls than the budget, and every task still succeeds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from cli_helpers import run_cli
from prometheus_client import REGISTRY
from sqlalchemy import select, text
from stack_helpers import import_small, run_all, serving

from adapters.temporal_client import connect
from config.defaults import ProviderLimits
from schema.db import Database
from schema.models import ProviderPollBudget
from schema.poll_budget import Turn, book_turn, booked_ahead, turn_spacing_s

pytestmark = [pytest.mark.integration, pytest.mark.long]


def test_turns_are_spaced_by_the_rate_and_never_booked_past_the_wait(stack, monkeypatch) -> None:
    """100 bookings from 10 threads at once at 20/s with 1 s of wait allowed: those booked are
    spaced turn_spacing_s(20) apart on one timeline; the rest are refused with how far the budget
    is booked, which `status --json` shows."""
    db, provider, rate, max_wait_s = Database(stack.database_url), f"test-{uuid.uuid4().hex[:8]}", 20.0, 1.0
    spacing_s = turn_spacing_s(rate)

    def book(_: int) -> Turn:
        with db.transaction() as session:
            return book_turn(session, provider, rate, max_wait_s)

    started = time.monotonic()
    with ThreadPoolExecutor(10) as pool:
        turns = list(pool.map(book, range(100)))
    elapsed = time.monotonic() - started
    booked = [t for t in turns if t.booked]
    refused = [t for t in turns if not t.booked]
    assert all(0 <= t.wait_s <= max_wait_s for t in booked), booked
    # one turn per spacing from the first, up to max_wait past the last booking
    assert 1 + max_wait_s // spacing_s <= len(booked) <= 1 + (max_wait_s + elapsed) / spacing_s, (len(booked), elapsed)
    assert refused and all(t.wait_s >= max_wait_s - spacing_s - elapsed for t in refused), refused
    with db.transaction() as session:
        ahead = booked_ahead(session, [provider, "never-booked"])
    assert set(ahead) == {provider} and 0 < ahead[provider] <= max_wait_s + spacing_s
    monkeypatch.setenv("REELQUEUE_PROVIDER_LIMITS", json.dumps({provider: {"polls_per_second": rate}}))
    shown = run_cli("status", "--json")
    assert shown.code == 0, shown.stdout + shown.stderr
    budget = json.loads(shown.stdout)["poll_budgets"][provider]
    assert budget["polls_per_second"] == rate and 0 <= budget["booked_ahead_s"] <= ahead[provider], budget
    with db.transaction() as session:
        session.execute(text("DELETE FROM provider_poll_budgets WHERE provider = :p"), {"p": provider})


TASKS = 300
BUDGET = 20  # status calls per second to the emulator, all workers together


def waited() -> float:
    """Seconds this process's status calls to the emulator waited for their turn (the workers run here)."""
    return REGISTRY.get_sample_value("reelqueue_poll_budget_wait_seconds_total", {"provider": "emulator"}) or 0.0


def emulator_stats(stack) -> dict:
    return httpx.get(f"{stack.emulator_url}/_sim/stats", timeout=10).json()


async def run_held(stack, client, folder, *, tasks: int, budget: float, webhooks: bool) -> tuple[list, dict, float]:
    """`tasks` one-second jobs, which the emulator holds running (however slowly a loaded machine
    submits them) until every one runs, then lets end at once; followed by two workers (each with
    its own Temporal connection, activities and database pool, as two worker processes would have)
    under a budget of `budget` status calls a second. The tasks, the emulator's stats, and the
    seconds the status calls waited for their turns."""
    settings = stack.model_copy(update={
        "webhooks_enabled": webhooks,
        "provider_limits": {"emulator": ProviderLimits(max_concurrent=tasks, polls_per_second=budget)},
        "worker_max_activities": 24,
    })
    products = [(f"P-{i:03d}", f"Polled item {i}", f"Thing number {i}") for i in range(tasks)]
    summary = import_small(settings, folder, products, duration_s=1)
    assert summary.tasks == tasks
    queue = f"test-{uuid.uuid4().hex[:12]}"
    waited_before = waited()
    held = {"max_running": tasks, "max_queued": tasks, "job_seconds": 1.0, "hold_running": True}
    httpx.post(f"{stack.emulator_url}/_sim/faults", json=held, timeout=10).raise_for_status()
    httpx.delete(f"{stack.emulator_url}/_sim/stats", timeout=10).raise_for_status()
    started = time.monotonic()
    try:
        async with contextlib.AsyncExitStack() as workers:
            for connection in (client, await connect(settings)):  # one connection serves one worker a queue
                await workers.enter_async_context(serving(connection, settings, queue))
            run = asyncio.create_task(run_all(client, settings, summary.import_id, queue, timeout=1400))
            deadline = time.monotonic() + 1200
            while emulator_stats(stack)["max_running"] < tasks:  # all running at once
                assert not run.done() and time.monotonic() < deadline, emulator_stats(stack)
                await asyncio.sleep(1)
            all_running = time.monotonic() - started
            httpx.post(f"{stack.emulator_url}/_sim/faults", json={"hold_running": False}, timeout=10).raise_for_status()
            finished = await run
    finally:
        httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10)
    stats = emulator_stats(stack)
    print(f"\n{tasks} tasks in {time.monotonic() - started:.0f} s (all running after {all_running:.0f} s); "
          f"status calls {stats['status_calls']} ({stats['status_calls_per_job']:.1f}/job), busiest second "
          f"{stats['status_calls_peak_per_s']}, waited for turns {waited() - waited_before:.0f} s, "
          f"webhooks {stats['webhooks_sent']}")
    assert {t.status for t in finished} == {"SUCCEEDED"}, sorted({t.status for t in finished})
    assert stats["jobs_created"] == tasks, stats
    return finished, stats, waited() - waited_before


async def test_asking_for_the_output_url_waits_its_turn_in_the_budget(stack, client, tmp_path) -> None:
    """With webhooks on, 8 jobs ending at once: each ending is confirmed by a poll and its output
    URL asked for by the fetch step, both status calls; at 2 a second, the busiest second at the
    emulator holds 2 (the fetch step's calls went around the budget: 4 and more)."""
    _, stats, waited_s = await run_held(stack, client, tmp_path, tasks=8, budget=2, webhooks=True)
    assert stats["webhooks_sent"] > 0 and stats["status_calls"] >= 16, stats  # a poll and a fetch per job
    assert waited_s > 0, "no status call ever waited: the budget was never pressed on"
    assert stats["status_calls_peak_per_s"] <= 2, stats


@pytest.mark.timeout(1500)  # 476 s at a load average of 16 to 20 on 2 cores; 234 s without a budget
async def test_300_running_jobs_without_webhooks_stay_within_the_status_call_budget(stack, client, tmp_path) -> None:
    _, stats, waited_s = await run_held(stack, client, tmp_path, tasks=TASKS, budget=BUDGET, webhooks=False)
    assert stats["webhooks_sent"] == 0, stats
    assert stats["status_calls"] > BUDGET * 30, stats
    assert waited_s > 0, "no status call ever waited: the budget was never pressed on"
    assert stats["status_calls_peak_per_s"] <= BUDGET, stats
    with Database(stack.database_url).transaction() as session:
        assert session.scalar(select(ProviderPollBudget.next_at).where(ProviderPollBudget.provider == "emulator"))
