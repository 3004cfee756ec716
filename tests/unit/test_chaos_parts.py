"""The chaos run's pure parts: how its size scales, its command line, and how spend is split by cause."""

from __future__ import annotations

import pytest

from bench.chaos import ChaosOptions, Restart, parse_args, run_ok, spend_by_cause


def test_kills_and_restarts_scale_with_the_tasks() -> None:
    full = ChaosOptions()
    assert (full.tasks, full.kill_target(), full.restart_rounds(), full.in_flight_target()) == (1000, 55, 2, 100)
    small = ChaosOptions(tasks=8)
    assert (small.kill_target(), small.restart_rounds(), small.in_flight_target()) == (3, 1, 4)
    assert ChaosOptions(tasks=200).kill_target() == 11
    assert ChaosOptions(tasks=200, kills=60, restarts=3, in_flight=20).kill_target() == 60


def test_the_command_line_sets_every_rate_and_keeps_the_issue_defaults() -> None:
    options, args = parse_args([])
    rates = options.rates
    assert (rates.submit_unknown, rates.submit_429, rates.submit_5xx, rates.expire_output_url) == (0.1, 0.1, 0.05, 0.1)
    assert (rates.duplicate_webhook, rates.reorder_webhook, rates.drop_webhook) == (0.2, 0.2, 0.2)
    assert options.outage_s == 60 and not args.json and not args.use_stack
    options, args = parse_args(["--tasks", "8", "--submit-429", "0.3", "--drop-webhook", "0", "--outage", "10",
                                "--kill-every", "3", "--json"])
    assert (options.tasks, options.rates.submit_429, options.rates.drop_webhook) == (8, 0.3, 0.0)
    assert (options.outage_s, options.kill_every_s, args.json) == (10, 3, True)
    with pytest.raises(ValueError, match="at most 1"):
        parse_args(["--submit-429", "0.7", "--submit-5xx", "0.5"])


def job(job_id: str, key: str, cost: float) -> dict:
    return {"id": job_id, "request_key": key, "usage": {"cost": cost} if cost else None}


def test_spend_is_split_by_cause() -> None:
    jobs = [
        job("j1", "t1-a1", 1.0),  # the video of t1
        job("j2", "t2-a1", 1.0),  # t2's first attempt: its output was not kept
        job("j3", "t2-a2", 1.0),  # the video of t2
        job("j4", "t2-a2", 1.0),  # a second job under t2's second request key, found by reconcile
        job("j5", "t3-a1", 1.0),  # t3 failed after its job succeeded
        job("j6", "t3-a2", 0.0),  # a failed job costs nothing
        job("j7", "t1-a1", 1.0),  # a duplicate nobody recorded
    ]
    tasks = {"t1": ("SUCCEEDED", 1), "t2": ("SUCCEEDED", 2), "t3": ("FAILED_FINAL", 2)}
    bound = {("t1", 1): "j1", ("t2", 1): "j2", ("t2", 2): "j3", ("t3", 1): "j5", ("t3", 2): "j6"}
    spend = spend_by_cause(jobs, tasks, bound, {"j4": "reconcile"})
    assert spend["provider_total"] == 6.0 and spend["wasted"] == 4.0 and spend["wasted_share"] == round(4 / 6, 4)
    assert spend["by_cause"] == {"duplicate_job:reconcile": 1.0, "duplicate_job:unrecorded": 1.0,
                                 "no_video:FAILED_FINAL": 1.0, "superseded_attempt": 1.0}
    assert spend_by_cause([], {}, {}, {}) == {"provider_total": 0.0, "wasted": 0.0, "wasted_share": 0.0,
                                              "by_cause": {}}


def test_a_run_is_ok_only_when_every_rule_was_decided_every_task_ended_and_every_restart_worked() -> None:
    rules = [{"rule": "gate_slots", "checked": True, "violations": 0}]
    restarts = [Restart(service=s, at_s=1.0, in_flight=3) for s in ("postgres", "s3")]
    assert run_ok(True, rules, {"SUCCEEDED": 8}, restarts)
    failed = [restarts[0], Restart(service="s3", at_s=2.0, in_flight=3, error="StackError: did not come back")]
    assert not run_ok(True, rules, {"SUCCEEDED": 8}, failed)  # a restart that raised tested nothing
    assert not run_ok(True, [{**rules[0], "checked": False}], {"SUCCEEDED": 8}, restarts)
    assert not run_ok(False, rules, {"SUCCEEDED": 8}, restarts)
    assert not run_ok(True, rules, {"SUCCEEDED": 7, "RUNNING": 1}, restarts)
    assert not run_ok(True, [], {"SUCCEEDED": 8}, restarts) and not run_ok(True, rules, {}, restarts)
