"""`make bench-pipeline`'s orchestration figures (issue 24), worked out from one run's raw numbers."""

from bench.pipeline import orchestration_cost


def test_orchestration_cost_compares_a_task_with_the_engines_cost_of_its_steps():
    engine = {"steps": 8, "cpu_s_per_wf": {"bench": 0.06, "temporal": 0.1, "postgres": 0.0}}
    one = {"cpu_s_per_task": {"temporal": 0.3, "worker": 0.3, "gateway": 0.05, "postgres": 0.05, "ffmpeg": 0.2,
                              "emulator": 0.07, "s3": 0.04},
           "queue_latency_s": {"activities_per_workflow": 10.0, "history_events_per_workflow": 113.1}}
    figures = orchestration_cost(engine, one)
    assert figures == {"engine_cpu_s_per_step": 0.02, "orchestration_cpu_s_per_task": 0.7, "steps_per_task": 10.0,
                       "orchestration_ratio": 3.5, "history_events_per_task": 113.1}
