"""The media step (lean-path-v1): proxy, HLS, thumbnail and the automatic checks of one raw output in
one activity, the raw output downloaded once and the proxy made once on local disk for the rest.

A failed HLS or thumbnail stays recorded on its rendition row (FAILED, with the error) and does not
fail the step: the proxy is what a task needs. When the workflow asks (`close`: a task with no review
to wait for), the step's last transaction settles the ledger and commits the task's ending, only if
the checks passed and no duplicate job of the task is unaccounted: the task row is locked while the
strays are read, so a stray and the settle cannot be split. Otherwise the workflow goes on as before
(review, a failed check's regeneration, the strays accounted) with the checks this step made.
Idempotent: renditions and checks are found by their business keys, settle writes once per key and
the ending once per source id.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sqlalchemy import exists, select
from temporalio import activity

from activities.errors import classified
from activities.failpoints import failpoint
from activities.ledger import LedgerActivities
from activities.media import MediaActivities
from activities.review import ReviewActivities
from activities.tasks import moved
from contracts.messages import (
    AssetRef,
    CheckInput,
    LedgerResult,
    MediaStepInput,
    MediaStepResult,
    RenditionsResult,
    TranscodeInput,
)
from schema.models import Task
from schema.strays import unaccounted


class MediaStepActivities:
    def __init__(self, media: MediaActivities, review: ReviewActivities, ledger: LedgerActivities):
        self.media = media
        self.review = review
        self.ledger = ledger

    @activity.defn(name="make_media")
    @classified
    def make_media(self, req: MediaStepInput) -> MediaStepResult:
        source = TranscodeInput(task_id=req.task_id, raw_asset_id=req.raw_asset_id)
        with tempfile.TemporaryDirectory(prefix="rq-media-step-") as tmp:
            work = Path(tmp)
            proxy, local = self.media.proxy_in(source, work)
            made = self.media.renditions_in(source, work, local)
            checks = None if req.checks is None else self.review.checked(CheckInput(
                task_id=req.task_id, attempt_no=req.attempt_no, proxy_asset_id=proxy.asset_id,
                **req.checks.model_dump()), local)
        closed = None
        if req.close is not None and (checks is None or checks.passed):
            closed = self._close(req, proxy, made)
        return MediaStepResult(proxy=proxy, renditions=made.summary(), checks=checks, closed=closed)

    def _close(self, req: MediaStepInput, proxy: AssetRef, made: RenditionsResult) -> LedgerResult | None:
        """Settle and end the task in one transaction, unless a duplicate job of it is unaccounted."""
        assert req.close is not None
        facts = {"proxy": proxy.key, "renditions": made.summary()}
        settle = req.close.model_copy(update={"moves": [m.with_facts(**facts) for m in req.close.moves]})
        failpoint("before_settle")
        with self.ledger.db.transaction() as session:
            session.execute(select(Task.id).where(Task.id == req.task_id).with_for_update())
            if session.scalar(select(exists().where(unaccounted(req.task_id)))):
                return None
            balance, done = self.ledger.close(session, settle)
        return balance.model_copy(update={"moved": moved(done)})
