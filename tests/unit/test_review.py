"""Review's pure parts: the plan's review settings (and plan ids that do not change), who is
sampled, reviewer tokens, the automatic checks on clips the emulator renders (real ffmpeg), the
state machine's review rows and the emulator's defect faults."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.tasks import checks_policy, review_policy, sampled
from adapters.media.checks import Expectations, check_video, detected_seconds
from adapters.media.transcode import make_proxy
from catalog.plan import PlanError, load_plan
from contracts.task import TaskEvent as E
from contracts.task import TaskStatus as S
from control import review_tokens as tokens
from emulator.faults import FaultBoard
from emulator.render import render_video
from emulator.wire import Faults
from schema.models import Task
from schema.state_machine import target

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SECRET = "s3cret"


def _plan(tmp_path: Path, template_lines: str, tail: str = ""):
    text = (EXAMPLES / "plan.toml").read_text()
    text = text.replace('id = "showcase"', f'id = "showcase"\n{template_lines}', 1) + "\n" + tail
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return load_plan(path)


def test_review_is_per_template_and_changes_the_plan_id_only_when_set(tmp_path):
    plain = load_plan(EXAMPLES / "plan.toml")
    assert "review" not in plain.canonical_json() and "sample_rate" not in plain.canonical_json()
    plan = _plan(tmp_path, 'review = "required"', "[review]\ndeadline_hours = 24\non_deadline = \"approve\"\n")
    assert plan.template("showcase").review == "required" and plan.review.on_deadline == "approve"
    assert plan.plan_id != plain.plan_id
    assert [t.review for t in plan.templates if t.id != "showcase"] == [None]


@pytest.mark.parametrize("lines, tail, needle", [
    ('review = "sample"', "", "needs sample_rate"),
    ('review = "required"\nsample_rate = 0.5', "", "only to review"),
    ('review = "always"', "", "review"),
    ('review = "required"', '[review]\non_deadline = "ignore"', "on_deadline"),
    ("", '[review]\non_failed_checks = "approve"', "review.on_failed_checks"),
])
def test_bad_review_settings_are_refused(tmp_path, lines, tail, needle):
    with pytest.raises(PlanError, match=needle):
        _plan(tmp_path, lines, tail)


def test_who_is_reviewed(tmp_path):
    task = Task(id="a" * 32, template_id="showcase")
    assert review_policy(load_plan(EXAMPLES / "plan.toml"), task) is None
    assert review_policy(_plan(tmp_path, 'review = "off"'), task) is None
    policy = review_policy(_plan(tmp_path, 'review = "required"'), task)
    assert policy.required and policy.deadline_s == 72 * 3600 and policy.on_deadline == "expire"
    assert review_policy(_plan(tmp_path, 'review = "sample"\nsample_rate = 0'), task).required is False
    assert review_policy(_plan(tmp_path, 'review = "sample"\nsample_rate = 1'), task).required is True


def test_checks_gate_the_templates_without_review(tmp_path):
    task = Task(id="a" * 32, template_id="showcase")
    assert checks_policy(_plan(tmp_path, 'review = "required"'), task) is None
    gate = checks_policy(load_plan(EXAMPLES / "plan.toml"), task)
    assert gate.required is False and gate.on_failed_checks == "review"
    assert gate.audio_expected is False and gate.max_black_ratio == 0.3  # silence is a reviewer's call
    failing = checks_policy(_plan(tmp_path, 'review = "off"', '[review]\non_failed_checks = "fail"'), task)
    assert failing.on_failed_checks == "fail"


def test_on_failed_checks_left_out_keeps_the_plan_id(tmp_path):
    """Plans that set [review] before the option existed keep their id (their imports are the same)."""
    plan = _plan(tmp_path, "", "[review]\ndeadline_hours = 24\n")
    assert "on_failed_checks" not in plan.canonical_json()
    assert _plan(tmp_path, "", '[review]\ndeadline_hours = 24\non_failed_checks = "review"\n').plan_id != plan.plan_id


def test_a_bad_on_failed_checks_exits_2_naming_the_field(cli, tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text((EXAMPLES / "plan.toml").read_text() + '\n[review]\non_failed_checks = "ignore"\n')
    result = cli("import", str(EXAMPLES / "catalog.csv"), "--plan", str(plan), "--dry-run")
    assert result.exit_code == 2, result.output
    assert "review.on_failed_checks" in result.output


def test_the_sample_is_a_stable_share():
    ids = [f"task-{n}" for n in range(4000)]
    drawn = [i for i in ids if sampled(i, 0.25)]
    assert 0.22 < len(drawn) / len(ids) < 0.28
    assert drawn == [i for i in ids if sampled(i, 0.25)]  # every worker draws the same


def test_reviewer_tokens():
    token = tokens.issue(SECRET, "imp_1", "rita", ttl_s=60, now=1000)
    assert tokens.verify(SECRET, token, "imp_1", now=1030).sub == "rita"
    refusals = {
        "missing": (None, "imp_1", 1030),
        "expired": (token, "imp_1", 1061),
        "forged": (tokens.issue("other", "imp_1", "rita", now=1000), "imp_1", 1030),
        "malformed": ("xyz", "imp_1", 1030),
    }
    for name, (given, imp, now) in refusals.items():
        with pytest.raises(tokens.TokenRefused) as refused:
            tokens.verify(SECRET, given, imp, now=now)
        assert not refused.value.other_import, name
    with pytest.raises(tokens.TokenRefused, match="another import") as other:
        tokens.verify(SECRET, token, "imp_2", now=1030)
    assert other.value.other_import
    body, mac = token.split(".")
    other_body = tokens.issue(SECRET, "imp_2", "rita", ttl_s=60, now=1000).split(".")[0]
    with pytest.raises(tokens.TokenRefused, match="not valid"):  # claims swapped under the old signature
        tokens.verify(SECRET, f"{other_body}.{mac}", "imp_2", now=1030)
    with pytest.raises(tokens.TokenRefused, match="not configured"):
        tokens.verify("", token, "imp_1", now=1030)
    assert tokens.csrf_ok(SECRET, token, tokens.csrf_token(SECRET, token))
    assert not tokens.csrf_ok(SECRET, token, None) and not tokens.csrf_ok(SECRET, token, "x")


def test_detected_seconds_sums_intervals_and_runs_an_open_one_to_the_end():
    log = ("[blackdetect @ 0x1] black_start:0 black_end:0.5 black_duration:0.5\n"
           "[freezedetect @ 0x2] lavfi.freezedetect.freeze_start: 1.25\n"
           "[blackdetect @ 0x1] black_start:1.5 black_end:2 black_duration:0.5\n")
    assert detected_seconds(log, "black", 3.0) == 1.0
    assert detected_seconds(log, "frozen", 3.0) == 1.75
    assert detected_seconds(log, "silence", 3.0) == 0.0


@pytest.mark.parametrize("defect, failing", [(None, []), ("black", ["black", "frozen"]), ("frozen", ["frozen"])])
def test_checks_catch_the_emulators_defective_clips(tmp_path, defect, failing):
    raw = render_video(tmp_path / "raw.mp4", image=EXAMPLES / "images" / "aurora-lamp.png", aspect_ratio="9:16",
                       duration_s=2, overlay_lines=["Aurora Lamp", "19.99 USD"], work_dir=tmp_path, mode="fast",
                       defect=defect)
    make_proxy(raw, tmp_path / "proxy.mp4", "9:16")
    expect = Expectations(aspect_ratio="9:16", duration_s=2, duration_tolerance_s=0.5, audio_expected=True,
                          max_black_ratio=0.3, max_frozen_ratio=0.5)
    checks = check_video(tmp_path / "proxy.mp4", expect)
    assert [c.name for c in checks] == ["duration", "black", "frozen", "silence", "ratio"]
    assert [c.name for c in checks if not c.passed] == failing
    wrong = Expectations(aspect_ratio="16:9", duration_s=5, duration_tolerance_s=0.5, audio_expected=True,
                         max_black_ratio=1, max_frozen_ratio=1)
    assert {c.name for c in check_video(tmp_path / "proxy.mp4", wrong) if not c.passed} == {"duration", "ratio"}


def test_review_rows_of_the_state_machine():
    assert target(S.POST_PROCESSING, E.REVIEW_REQUIRED) is S.REVIEW
    assert target(S.REVIEW, E.REVIEW_APPROVED) is S.SUCCEEDED
    assert target(S.REVIEW, E.REVIEW_REJECTED) is S.REJECTED
    assert target(S.REVIEW, E.REVIEW_REGENERATE) is S.QUEUED
    assert target(S.REVIEW, E.DEADLINE_PASSED) is S.EXPIRED
    assert target(S.QUEUED, E.REVIEW_REGENERATE) is None and target(S.REJECTED, E.REVIEW_REGENERATE) is None
    assert target(S.POST_PROCESSING, E.CHECKS_FAILED) is S.QUEUED and target(S.REVIEW, E.CHECKS_FAILED) is None


def test_defect_faults_apply_to_the_next_jobs_only():
    board = FaultBoard()
    board.update(Faults(black_video=1, frozen_video=2))
    assert [board.take("black_video"), board.take("black_video")] == [True, False]
    assert [board.take("frozen_video") for _ in range(3)] == [True, True, False]


@pytest.mark.parametrize("args, needle", [
    (["imp_x", "t2"], "without --approve or --reject"),
    (["imp_x", "--approve", "t1", "t2", "--reject", "t3"], "choose one of"),
    (["imp_x", "--reject", "t1", "t2"], "--reject needs --reason"),
    (["imp_x", "--list", "--approve", "t1"], "choose one of"),
    (["imp_x", "--hours", "-1"], "--hours must be above 0"),
    (["imp_x", "--approve", "t1", "--hours", "-1"], "--hours must be above 0"),  # one id: no extra ones
])
def test_review_cli_refuses_bad_input_before_any_io(args, needle):
    from typer.testing import CliRunner

    from starter import app

    result = CliRunner().invoke(app, ["review", *args])
    assert result.exit_code == 2 and needle in result.stdout + result.stderr, result.exception
