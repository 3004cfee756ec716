"""The alert rules and dashboard queries as Prometheus reads them: every expression parses
(`promtool check rules`), and every alert fires from a cold start, that is from only the series its
situation produces (a counter never incremented has none), under `promtool test rules`.

promtool comes from Debian's `prometheus` package (.ci/run installs it when missing); without it these
tests skip and say so."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from metrics.queries import dashboard_files, panels

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
GATEWAY = {"job": "gateway", "instance": "gateway:8000"}
WORKER = {"job": "worker", "instance": "10.0.0.7:9464", "queue": "io"}
MEDIA = {"job": "worker", "instance": "10.0.0.8:9464", "queue": "media"}
# Per alert: the series a cold-started Prometheus holds when the situation happens (values per minute,
# promtool's expanding notation), when to evaluate, and the labels the alert carries. Nothing else
# exists: no counter that was never incremented, no series of another provider.
COLD_STARTS: dict[str, tuple[list[tuple[str, dict[str, str], str]], str, dict[str, str]]] = {
    "ReelqueueMetricsDatabaseDown": ([("reelqueue_database_up", GATEWAY, "0x10")], "5m", GATEWAY),
    "ReelqueueSubmissionsStalled": (  # tasks queue after a restart: no submit counter exists yet
        [("reelqueue_queue_depth", {**GATEWAY, "provider": "runway"}, "5x40")], "30m", {"provider": "runway"}),
    "ReelqueueQueueAgeHigh": ([("reelqueue_queue_oldest_age_seconds", {**GATEWAY, "provider": "runway"}, "2000x20")],
                              "15m", {"provider": "runway"}),
    "ReelqueueProviderAtLimit": ([("reelqueue_provider_active", {**GATEWAY, "provider": "runway"}, "20x40"),
                                  ("reelqueue_provider_limit", {**GATEWAY, "provider": "runway"}, "20x40")],
                                 "35m", {"provider": "runway"}),
    "ReelqueueSubmitUnknown": ([("reelqueue_submit_unknown", {**GATEWAY, "provider": "runway"}, "1x20")],
                               "16m", {"provider": "runway"}),
    "ReelqueueSubmitsUnknownRate": (
        [("reelqueue_submits_total", {**WORKER, "provider": "runway", "outcome": "unknown"}, "1+1x40"),
         ("reelqueue_submits_total", {**WORKER, "provider": "runway", "outcome": "accepted"}, "1+1x40")],
        "25m", {"provider": "runway"}),
    "ReelqueueWebhookLagHigh": (
        [("reelqueue_webhook_lag_seconds_bucket", {**GATEWAY, "provider": "runway", "le": "60"}, "0x40"),
         ("reelqueue_webhook_lag_seconds_bucket", {**GATEWAY, "provider": "runway", "le": "120"}, "1+1x40"),
         ("reelqueue_webhook_lag_seconds_bucket", {**GATEWAY, "provider": "runway", "le": "+Inf"}, "1+1x40")],
        "25m", {"provider": "runway"}),
    "ReelqueueStatusCallErrors": (
        [("reelqueue_status_calls_total", {**WORKER, "provider": "runway", "result": "error"}, "1+1x40"),
         ("reelqueue_status_calls_total", {**WORKER, "provider": "runway", "result": "ok"}, "1+1x40")],
        "25m", {"provider": "runway"}),
    "ReelqueueOutputUrlExpiryRisk": (
        [("reelqueue_fetch_backlog_oldest_age_seconds", {**GATEWAY, "provider": "runway"}, "1000x10")],
        "6m", {"provider": "runway"}),
    "ReelqueueMediaWorkersSaturated": ([("reelqueue_media_utilisation", MEDIA, "1x20")], "16m", {}),
    "ReelqueueTransitionConflicts": (
        [("reelqueue_transition_conflicts_total", {**WORKER, "kind": "version"}, "60+60x40")], "25m",
        {"kind": "version"}),
    "ReelqueueWebhookOrphansOld": (
        [("reelqueue_webhook_orphan_oldest_age_seconds", {**GATEWAY, "provider": "runway"}, "2000x20")],
        "15m", {"provider": "runway"}),
    "ReelqueueReservedCreditOld": (
        [("reelqueue_reserved_credit_oldest_age_seconds", {**GATEWAY, "tenant": "acme"}, "30000x20")],
        "16m", {"tenant": "acme"}),
    "ReelqueueTargetDown": ([("up", WORKER, "0x10"), ("up", GATEWAY, "1x10")], "6m", WORKER),
    "ReelqueueTargetsMissing": ([("up", GATEWAY, "1x20")], "11m", {"job": "worker"}),  # discovery finds no worker
    "ReelqueueProviderBreakerOpen": (
        [("reelqueue_provider_breaker_state", {**WORKER, "provider": "runway"}, "2x20")], "16m",
        {"provider": "runway"}),
    "ReelqueueProviderBreakerFlapping": (  # the counter appears with its first opening
        [("reelqueue_provider_breaker_opens_total", {**WORKER, "provider": "runway"}, "_x5 1 2 3 4 5 6")], "11m",
        {"provider": "runway"}),
}


def _promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        pytest.skip("promtool is missing: apt-get install prometheus (Debian's package; .ci/run installs it)")
    return found


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"]
            for rule in group["rules"]]


def _series(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ", ".join(f'{key}="{value}"' for key, value in labels.items()) + "}"


def _annotations(rule: dict[str, Any], labels: dict[str, str]) -> dict[str, str]:
    return {key: re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), text)
            for key, text in rule["annotations"].items()}


def _promtool_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_every_alert_expression_parses() -> None:
    done = _promtool_run("check", "rules", str(MONITORING / "alerts.yml"), cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_dashboard_expression_parses(tmp_path: Path) -> None:
    """Each panel query of every dashboard as a recording rule, Grafana's `$__rate_interval` as a duration."""
    queries = [expr for path in dashboard_files() for panel in panels(path) for expr in panel.exprs]
    assert len(queries) >= 60
    rules = [{"record": f"panel:query_{n}", "expr": q.replace("$__rate_interval", "5m")} for n, q in enumerate(queries)]
    (tmp_path / "panels.yml").write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    done = _promtool_run("check", "rules", "panels.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_fires_from_a_cold_start(tmp_path: Path) -> None:
    rules = {rule["alert"]: rule for rule in _rules()}
    assert set(COLD_STARTS) == set(rules), "every alert needs its cold-start case here"
    tests = []
    for name, (series, at, labels) in COLD_STARTS.items():
        rule = rules[name]
        expected = {**labels, **rule["labels"]}
        tests.append({"interval": "1m",
                      "input_series": [{"series": _series(n, lbl), "values": v} for n, lbl, v in series],
                      "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": [
                          {"exp_labels": expected, "exp_annotations": _annotations(rule, expected)}]}]})
    _check(tmp_path, tests)


def test_the_stalled_alert_stays_silent_while_submits_go_out(tmp_path: Path) -> None:
    depth = {**GATEWAY, "provider": "runway"}
    submits = {**WORKER, "provider": "runway", "outcome": "accepted"}
    _check(tmp_path, [{"interval": "1m",
                       "input_series": [{"series": _series("reelqueue_queue_depth", depth), "values": "5x40"},
                                        {"series": _series("reelqueue_submits_total", submits), "values": "1+1x40"}],
                       "alert_rule_test": [{"eval_time": "30m", "alertname": "ReelqueueSubmissionsStalled",
                                            "exp_alerts": []}]}])


def _check(folder: Path, tests: list[dict[str, Any]]) -> None:
    shutil.copy(MONITORING / "alerts.yml", folder / "alerts.yml")
    (folder / "cases.yml").write_text(yaml.safe_dump({"rule_files": ["alerts.yml"], "evaluation_interval": "1m",
                                                      "tests": tests}, sort_keys=False))
    done = _promtool_run("test", "rules", "cases.yml", cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
