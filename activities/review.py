"""The automatic checks of a task's proxy before review (adapters/media/checks.py), stored once
per rendition in `review_checks` so the gallery and `reelqueue review --list` show them.

Idempotent: a rendition already checked returns its stored result without decoding again.
A proxy ffmpeg cannot read is a failed check (the reviewer sees it), not an activity failure.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from temporalio import activity

from activities.errors import classified
from activities.heartbeats import QuietHeartbeat
from adapters.media.checks import Expectations, check_video
from adapters.media.ffmpeg_tools import MediaError
from adapters.storage import ObjectStorage
from contracts.messages import CheckInput, CheckOutcome, CheckResult
from schema.db import Database
from schema.models import Asset, ReviewCheck


class ReviewActivities:
    def __init__(self, db: Database, storage: ObjectStorage):
        self.db = db
        self.storage = storage

    @activity.defn(name="check_output")
    @classified
    def check_output(self, req: CheckInput) -> CheckResult:
        return self.checked(req)

    def checked(self, req: CheckInput, local: Path | None = None) -> CheckResult:
        """The proxy's checks as stored, or run now on `local` (the media step's copy, lean-path-v1) or a
        downloaded one, and stored."""
        with self.db.transaction() as session:
            stored = session.scalar(select(ReviewCheck).where(ReviewCheck.asset_id == req.proxy_asset_id))
            if stored is not None:
                return CheckResult.model_validate(stored.results)
            key = session.get(Asset, req.proxy_asset_id).key
        result = self._inspect(key, req, local)
        with self.db.transaction() as session:
            session.execute(
                insert(ReviewCheck)
                .values(task_id=req.task_id, attempt_no=req.attempt_no, asset_id=req.proxy_asset_id,
                        passed=result.passed, results=result.model_dump(mode="json"))
                .on_conflict_do_nothing(constraint="uq_review_checks_asset")
            )
        return result

    def _inspect(self, key: str, req: CheckInput, local: Path | None) -> CheckResult:
        policy = req.policy
        expect = Expectations(aspect_ratio=req.aspect_ratio, duration_s=req.duration_s,
                              duration_tolerance_s=policy.duration_tolerance_s, audio_expected=policy.audio_expected,
                              max_black_ratio=policy.max_black_ratio, max_frozen_ratio=policy.max_frozen_ratio)
        heartbeat = QuietHeartbeat()
        with tempfile.TemporaryDirectory(prefix="rq-check-") as tmp:
            path = local or self.storage.get_to_file(key, Path(tmp) / "proxy.mp4")
            heartbeat("checks")
            try:
                found = [CheckOutcome(name=c.name, passed=c.passed, detail=c.detail) for c in check_video(path, expect)]
            except MediaError as exc:
                found = [CheckOutcome(name="readable", passed=False, detail=str(exc)[:300])]
        return CheckResult(passed=all(c.passed for c in found), checks=found)
