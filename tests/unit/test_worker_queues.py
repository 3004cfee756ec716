"""worker.py's queue options: which queues a process serves, which steps are media, how many media slots."""

from __future__ import annotations

import pytest

import worker
from activities import build_activities
from config.settings import Settings
from contracts import workflow_api as api


def test_queues_option() -> None:
    assert worker.parse_queues("io,media") == ("io", "media")
    assert worker.parse_queues(" media ") == ("media",)
    assert worker.parse_queues("io,io") == ("io",)
    for bad in ("", "gpu", "io,gpu", ","):
        with pytest.raises(ValueError, match="--queues takes io and/or media"):
            worker.parse_queues(bad)


def test_the_media_worker_registers_exactly_the_media_steps() -> None:
    activities = build_activities(Settings(s3_access_key="k", s3_secret_key="s"), client=None)
    names = {a.__temporal_activity_definition.name: a.__name__ for a in activities}  # type: ignore[attr-defined]
    assert all(defn == name for defn, name in names.items())  # the workflow routes by the method's name
    assert {a.__name__ for a in worker.media_steps(activities)} == set(api.MEDIA_ACTIVITIES)


def test_media_slots_follow_the_cores_unless_set(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(worker.os, "sched_getaffinity", lambda _pid: set(range(8)))
    monkeypatch.setattr(worker, "CGROUP_CPU_MAX", tmp_path / "cpu.max")
    assert worker.usable_cores() == 8  # no cgroup file: the affinity
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert worker.usable_cores() == 8
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # a container limited to 1.5 CPUs
    assert worker.usable_cores() == 2
    assert worker.media_slots(Settings()) == 2
    assert worker.media_slots(Settings(media_max_activities=5)) == 5
    monkeypatch.setattr(worker.os, "sched_getaffinity", lambda _pid: {0})
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert worker.media_slots(Settings()) == 2  # never fewer than 2


def test_a_bad_queue_is_refused_with_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        worker.main(["--queues", "gpu"])
    assert exited.value.code == 2 and "--queues takes io and/or media" in capsys.readouterr().err


def test_slot_use_counts_local_activities_on_both_sides() -> None:
    """In flight counts every execution the interceptor sees, local activities (record_transition)
    included; the slots it is divided by must count theirs too, or an io worker shows over 100 %."""
    settings = Settings(worker_max_activities=8, worker_max_local_activities=8, media_max_activities=3)
    assert worker.activity_slots(settings, ("io",)) == 16
    assert worker.activity_slots(settings, ("media",)) == 3
    assert worker.activity_slots(settings, ("io", "media")) == 19
    tuning = worker.worker_tuning(settings)
    assert tuning["interceptors"][0].slots == tuning["max_concurrent_activities"] + \
        tuning["max_concurrent_local_activities"]


def test_worker_versioning_is_off_without_a_deployment_name_and_names_the_build_with_one() -> None:
    from temporalio.common import VersioningBehavior

    assert worker.deployment_config(Settings()) is None
    config = worker.deployment_config(Settings(worker_deployment_name="reelqueue", worker_build_id="abc123"))
    assert config is not None and config.use_worker_versioning
    assert (config.version.deployment_name, config.version.build_id) == ("reelqueue", "abc123")
    assert config.default_versioning_behavior == VersioningBehavior.AUTO_UPGRADE


def test_each_workflow_type_says_how_it_moves_between_builds_on_versioned_workers_only() -> None:
    """Pinned where a run is a task (it finishes on its build), auto-upgrade for the gate, which runs
    for good; the plain classes carry none (the server refuses a behaviour from an unversioned worker)."""
    from temporalio.common import VersioningBehavior
    from temporalio.workflow import _Definition

    from workflows.versioned import VERSIONED_WORKFLOWS

    def behaviours(classes: list[type]) -> dict[str | None, VersioningBehavior]:
        return {defn.name: defn.versioning_behavior for defn in map(_Definition.must_from_class, classes)}

    assert behaviours(VERSIONED_WORKFLOWS) == {api.WORKFLOW_NAME: VersioningBehavior.PINNED,
                                               api.RENDITIONS_WORKFLOW_NAME: VersioningBehavior.PINNED,
                                               api.GATE_WORKFLOW_NAME: VersioningBehavior.AUTO_UPGRADE}
    assert set(behaviours(worker.WORKFLOWS).values()) == {VersioningBehavior.UNSPECIFIED}
    for plain, versioned in zip(worker.WORKFLOWS, VERSIONED_WORKFLOWS, strict=True):
        assert issubclass(versioned, plain)  # the same code: only the behaviour differs


def test_a_deployment_name_without_a_build_id_is_refused_with_exit_2(capsys, monkeypatch) -> None:
    from config.settings import get_settings

    monkeypatch.setenv("REELQUEUE_WORKER_DEPLOYMENT_NAME", "reelqueue")
    monkeypatch.delenv("REELQUEUE_WORKER_BUILD_ID", raising=False)
    get_settings.cache_clear()
    try:
        with pytest.raises(SystemExit) as exited:
            worker.main(["--queues", "io"])
    finally:
        get_settings.cache_clear()
    assert exited.value.code == 2 and "REELQUEUE_WORKER_BUILD_ID" in capsys.readouterr().err


def test_promote_without_a_deployment_name_is_refused_with_exit_2(cli) -> None:
    result = cli("temporal", "promote", "abc123")
    assert result.exit_code == 2 and "REELQUEUE_WORKER_DEPLOYMENT_NAME" in result.stderr
