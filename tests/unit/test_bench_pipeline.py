"""`make bench-pipeline`'s orchestration figures, worked out from one run's raw numbers."""

import pytest

from bench.pipeline import engine_summary, orchestration_cost

RUNS = [{"cpu_s_per_step": 0.0242, "wf_per_s": 12.0, "workflows": 200},
        {"cpu_s_per_step": 0.0152, "wf_per_s": 16.0, "workflows": 200},
        {"cpu_s_per_step": 0.02, "wf_per_s": 14.0, "workflows": 250}]


def test_the_engines_cost_per_step_is_the_median_of_its_runs_with_their_spread():
    engine = engine_summary(RUNS)
    assert engine["cpu_s_per_step_median"] == 0.02
    assert engine["cpu_s_per_step_runs"] == [0.0242, 0.0152, 0.02]
    assert engine["spread"] == pytest.approx(0.009)
    assert engine["spread_of_median"] == 0.45


def test_orchestration_ratio_scales_the_engines_step_by_nine_not_by_the_activities_counted():
    one = {"cpu_s_per_task": {"temporal": 0.3, "worker": 0.3, "gateway": 0.05, "postgres": 0.05, "ffmpeg": 0.2,
                              "emulator": 0.07, "s3": 0.04},
           "queue_latency_s": {"activities_per_workflow": 4.0, "history_events_per_workflow": 81.0}}
    figures = orchestration_cost(engine_summary(RUNS), one)
    assert figures["orchestration_cpu_s_per_task"] == 0.7  # not ffmpeg, the emulator or S3
    assert figures["orchestration_ratio"] == round(0.7 / (0.02 * 9), 2)  # 4 activities would have made it 8.75
    assert figures["engine_cpu_s_per_step_runs"] == [0.0242, 0.0152, 0.02]
    assert figures["activities_per_task"] == 4.0
    assert figures["history_events_per_task"] == 81.0


def test_a_ratio_on_engine_runs_shorter_than_200_workflows_is_marked_not_comparable():
    assert engine_summary(RUNS)["comparable"] is True
    assert engine_summary([*RUNS[:2], RUNS[2] | {"workflows": 3}])["comparable"] is False
