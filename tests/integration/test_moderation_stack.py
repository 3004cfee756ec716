"""Moderation on the real embedded stack: the Rekognition adapter over HTTP against the emulator's
dialect (signature, flag marker, faults, a held answer), and the judgement record on Postgres
(insert once per key, reads scoped to the tenant, the table's checks)."""

from __future__ import annotations

import base64
import uuid
from decimal import Decimal

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy.exc import IntegrityError

from config.settings import Settings
from contracts.moderation import Evidence, Frame, FramesSubject, Gate, ImageSubject, Judgement, ModeratorError, Verdict
from emulator.flag_marker import sample_png
from moderation.rekognition import RekognitionModerationConfig, RekognitionModerator
from schema import tenants
from schema.db import Database
from schema.moderation_judgements import KeyOfAnotherTenant, judgements_for, record_judgement

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


MARKED, PLAIN = data_uri(sample_png(320, 180, marked=True)), data_uri(sample_png(320, 180, marked=False))


@pytest.fixture
def rekognition(stack: Settings):
    made = RekognitionModerator(RekognitionModerationConfig.emulated(stack.emulator_url).model_copy(
        update={"timeout_s": 2.0}))
    yield made
    made.close()
    httpx.delete(f"{stack.emulator_url}/_sim/faults", timeout=10).raise_for_status()


def _faults(stack: Settings, **values: object) -> None:
    httpx.post(f"{stack.emulator_url}/_sim/faults", json={"dialect": "rekognition", **values},
               timeout=10).raise_for_status()


def test_rekognition_over_http_against_the_emulator(stack: Settings, rekognition: RekognitionModerator):
    assert rekognition.judge(ImageSubject(url=PLAIN)).verdict is Verdict.ALLOW
    flagged = rekognition.judge(FramesSubject(frames=(Frame(at_s=0.5, url=PLAIN), Frame(at_s=1.5, url=MARKED))))
    assert (flagged.verdict, flagged.categories, flagged.model_version) == (
        Verdict.BLOCK, ("Graphic Violence", "Violence"), "7.0")
    assert flagged.evidence.frames_s == (1.5,) and flagged.latency_ms > 0

    stranger = RekognitionModerator(RekognitionModerationConfig.emulated(stack.emulator_url).model_copy(
        update={"secret_access_key": SecretStr("not-the-emulated-secret")}))
    with pytest.raises(ModeratorError) as forged:
        stranger.judge(ImageSubject(url=PLAIN))
    assert (forged.value.retryable, forged.value.http_status) == (False, 403)
    assert "InvalidSignatureException" in str(forged.value)


@pytest.mark.parametrize(("fault", "status"), [({"submit_status": 429, "submit_status_count": 1}, 400),
                                               ({"submit_outage_s": 30}, 503)])
def test_throttling_and_outage_over_http_are_retryable(stack: Settings, rekognition: RekognitionModerator,
                                                       fault: dict, status: int):
    _faults(stack, **fault)
    with pytest.raises(ModeratorError) as raised:
        rekognition.judge(ImageSubject(url=PLAIN))
    assert (raised.value.retryable, raised.value.http_status) == (True, status)


def test_an_answer_that_never_comes_is_retryable(stack: Settings, rekognition: RekognitionModerator):
    _faults(stack, submit_hang_after_create=1)
    with pytest.raises(ModeratorError) as held:
        rekognition.judge(ImageSubject(url=PLAIN))
    assert held.value.retryable and "Timeout" in str(held.value)
    assert rekognition.judge(ImageSubject(url=PLAIN)).verdict is Verdict.ALLOW  # the next call is answered


def _tenant(db: Database) -> str:
    tenant_id = f"mod-{uuid.uuid4().hex[:10]}"
    with db.transaction() as session:
        tenants.create_tenant(session, tenant_id, tenants.TenantLimits(credits=Decimal(10)))
    return tenant_id


BLOCKED = Judgement(verdict=Verdict.BLOCK, moderator="rekognition", model_version="7.0", subject_kind="video_frames",
                    categories=("Violence",), scores={"Violence": 0.96, "Graphic Violence": 0.96},
                    evidence=Evidence(frames_s=(1.5, 3.0), note="Violence > Graphic Violence"), latency_ms=41.6)


def test_a_judgement_is_recorded_once_and_read_only_by_its_tenant(stack: Settings):
    db = Database(stack.database_url)
    owner, other = _tenant(db), _tenant(db)
    key = f"task-1:run1:output:rekognition:{uuid.uuid4().hex[:8]}"
    with db.transaction() as session:
        first = record_judgement(session, tenant_id=owner, subject_kind="task", subject_id="task-1", gate=Gate.OUTPUT,
                                 judgement=BLOCKED, idempotency_key=key)
        first_id = first.id
    retried = BLOCKED.model_copy(update={"verdict": Verdict.ALLOW, "latency_ms": 9.0})  # a second answer, later
    with db.transaction() as session:
        again = record_judgement(session, tenant_id=owner, subject_kind="task", subject_id="task-1", gate=Gate.OUTPUT,
                                 judgement=retried, idempotency_key=key)
        assert (again.id, again.verdict, again.latency_ms) == (first_id, "block", 42)
        record_judgement(session, tenant_id=owner, subject_kind="task", subject_id="task-1", gate=Gate.INPUT,
                         judgement=BLOCKED.model_copy(update={"subject_kind": "text", "verdict": Verdict.ALLOW}),
                         idempotency_key=key + ":input")
    with db.transaction() as session:
        rows = judgements_for(session, owner, "task", "task-1")
        assert [(r.gate, r.verdict, r.content_kind) for r in rows] == [("output", "block", "video_frames"),
                                                                       ("input", "allow", "text")]
        stored = rows[0]
        assert (stored.categories, stored.scores["Graphic Violence"], stored.evidence["frames_s"]) == (
            ["Violence"], 0.96, [1.5, 3.0])
        assert [r.gate for r in judgements_for(session, owner, "task", "task-1", Gate.INPUT)] == ["input"]
        assert judgements_for(session, other, "task", "task-1") == []
    with pytest.raises(KeyOfAnotherTenant), db.transaction() as session:
        record_judgement(session, tenant_id=other, subject_kind="task", subject_id="task-1", gate=Gate.OUTPUT,
                         judgement=BLOCKED, idempotency_key=key)
    with pytest.raises(IntegrityError), db.transaction() as session:
        record_judgement(session, tenant_id=owner, subject_kind="import", subject_id="x",  # type: ignore[arg-type]
                         gate=Gate.INPUT, judgement=BLOCKED, idempotency_key=key + ":bad")
