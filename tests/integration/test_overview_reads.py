"""The overview page's failures, thumbnails and task list (control/overview.py: the top of each side
of an import's scope, walked in the indexes of migration 0018) equal a plain query over the import's
whole scope, on a few hundred tasks with mixed statuses, reasons, tied times and thumbnails, for an
import and for a later one that reuses its tasks (`import_tasks`); past FAILURES_READ failed tasks
the groups count the first ones by id and say so."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from stack_helpers import import_small

from control import overview as page
from schema.db import Database

pytestmark = pytest.mark.integration

_SCOPE = "SELECT id FROM tasks WHERE import_id = :imp UNION ALL SELECT task_id FROM import_tasks WHERE import_id = :imp"
_FAILED = ", ".join(f"'{s}'" for s in page.FAILED)
REF_FAILURES = f"""
SELECT t.status, coalesce(t.last_error_class, '') AS error_class, coalesce(left(t.last_error, 300), '') AS error,
       count(*) AS n, (array_agg(t.id ORDER BY t.id))[1:{page.TASKS_PER_FAILURE}] AS task_ids,
       (array_agg(t.workflow_id ORDER BY t.id))[1:{page.TASKS_PER_FAILURE}] AS workflow_ids
  FROM tasks t WHERE t.id IN (SELECT id FROM tasks WHERE id IN ({_SCOPE}) AND status IN ({_FAILED})
                               ORDER BY id LIMIT :n)
 GROUP BY 1, 2, 3 ORDER BY n DESC, t.status, error_class, error"""
REF_THUMBNAILS = f"""
SELECT t.id AS task_id, thumb.key AS thumbnail_key, proxy.key AS video_key
  FROM tasks t
  JOIN LATERAL (SELECT a.key FROM renditions r JOIN assets a ON a.id = r.asset_id
                 WHERE r.task_id = t.id AND r.profile = 'THUMBNAIL' AND r.status = 'READY'
                 ORDER BY r.created_at DESC LIMIT 1) thumb ON true
  LEFT JOIN assets proxy ON proxy.id = t.output_asset_id
 WHERE t.id IN ({_SCOPE}) AND t.status = 'SUCCEEDED'
 ORDER BY t.finished_at DESC NULLS LAST, t.id LIMIT {page.SHOWN_THUMBNAILS}"""
REF_TASKS = f"""
SELECT t.id, t.status, t.updated_at,
       (SELECT a.route_note FROM attempts a WHERE a.task_id = t.id ORDER BY a.attempt_no DESC LIMIT 1)
  FROM tasks t WHERE t.id IN ({_SCOPE}) ORDER BY t.updated_at DESC, t.id LIMIT {page.SHOWN_TASKS}"""

# Statuses, reasons and times from each task's id: ties in updated_at and finished_at, NULL finish
# times, NULL and shared reasons, a long reason cut at 300 characters.
_MIX = """
UPDATE tasks SET
  status = (ARRAY['FAILED_FINAL','NEEDS_ATTENTION','CANCELED','SUCCEEDED','SUCCEEDED','SUCCEEDED','RUNNING'])
           [1 + abs(hashtext(id)) % 7],
  last_error_class = CASE abs(hashtext(id || 'c')) % 6 WHEN 0 THEN 'class-1' END,
  last_error = CASE abs(hashtext(id || 'e')) % 8 WHEN 0 THEN NULL WHEN 1 THEN repeat('long ', 100)
               ELSE 'reason A' END,
  updated_at = timestamptz '2026-01-01' + (abs(hashtext(id || 'u')) % 40) * interval '1 minute',
  finished_at = CASE WHEN abs(hashtext(id || 'f')) % 6 = 0 THEN NULL
                     ELSE timestamptz '2026-01-01' + (abs(hashtext(id || 'f')) % 30) * interval '1 minute' END
 WHERE import_id IN (:a, :b)"""
# Thumbnails for most SUCCEEDED tasks (two for some: the later one counts; a FAILED one for others),
# a proxy for half of them.
_ASSETS = """
INSERT INTO assets (id, tenant_id, task_id, kind, business_key, bucket, key, size, sha256)
SELECT t.id || '/' || k.kind, t.tenant_id, t.id, k.kind, t.id || '/' || k.kind, 'b', t.id || '/' || k.kind, 1,
       repeat('0', 64)
  FROM tasks t CROSS JOIN (VALUES ('RAW_OUTPUT'), ('THUMBNAIL'), ('THUMB2'), ('PROXY')) k(kind)
 WHERE t.import_id IN (:a, :b) AND t.status = 'SUCCEEDED'"""
_RENDITIONS = """
INSERT INTO renditions (id, tenant_id, task_id, raw_asset_id, profile, pipeline_version, status, asset_id, created_at)
SELECT t.id || '/' || v.version, t.tenant_id, t.id, t.id || '/RAW_OUTPUT', 'THUMBNAIL', v.version,
       CASE WHEN abs(hashtext(t.id || 'r')) % 4 = 0 THEN 'FAILED' ELSE 'READY' END,
       CASE WHEN abs(hashtext(t.id || 'r')) % 4 = 0 THEN NULL ELSE t.id || '/' || v.asset END,
       timestamptz '2026-01-01' + v.minute * interval '1 minute'
  FROM tasks t CROSS JOIN (VALUES ('v1', 'THUMBNAIL', 1), ('v2', 'THUMB2', 2)) v(version, asset, minute)
 WHERE t.import_id IN (:a, :b) AND t.status = 'SUCCEEDED' AND (v.version = 'v1' OR abs(hashtext(t.id)) % 3 = 0)"""
_PROXIES = """
UPDATE tasks SET output_asset_id = id || '/PROXY'
 WHERE import_id IN (:a, :b) AND status = 'SUCCEEDED' AND abs(hashtext(id || 'p')) % 2 = 0"""


def _reference(session, import_id: str, failures_read: int):  # noqa: ANN001, ANN202
    imp = {"imp": import_id}
    failures = [(r.status, r.error_class, r.error, r.n, list(zip(r.task_ids, r.workflow_ids, strict=True)))
                for r in session.execute(text(REF_FAILURES), {**imp, "n": failures_read})]
    thumbnails = [tuple(r) for r in session.execute(text(REF_THUMBNAILS), imp)]
    tasks = [tuple(r) for r in session.execute(text(REF_TASKS), imp)]
    return failures, thumbnails, tasks


def _shown(session, import_id: str):  # noqa: ANN001, ANN202
    failures, capped = page._failures(session, import_id)
    return ([(f.status, f.error_class, f.error, f.count, f.tasks) for f in failures],
            [(t.task_id, t.thumbnail_key, t.video_key) for t in page._thumbnails(session, import_id)],
            [(t.task_id, t.status, t.updated_at, t.route_note) for t in page._tasks(session, import_id)]), capped


def test_the_pages_lists_equal_a_plain_query_over_the_scope(stack, tmp_path, monkeypatch):
    db = Database(stack.database_url)
    kw = {"locales": ("en-US", "de-DE"), "ratios": ("9:16", "16:9")}  # 4 tasks a product
    products = [(f"O-{i}", "Lamp", "A lamp") for i in range(60)]
    first = import_small(stack, tmp_path, products, **kw)
    second = import_small(stack, tmp_path, [*products, *((f"N-{i}", "Vase", "A vase") for i in range(20))],
                          **kw)  # reuses the first import's 240 tasks, creates 80
    ids = {"a": first.import_id, "b": second.import_id}
    with db.transaction() as session:
        for sql in (_MIX, _ASSETS, _RENDITIONS, _PROXIES):
            session.execute(text(sql), ids)
        reused = session.scalar(text("SELECT count(*) FROM import_tasks WHERE import_id = :b"), ids)
        assert reused == 240

    with db.transaction() as session:
        for import_id in ids.values():
            shown, capped = _shown(session, import_id)
            failures, thumbnails, tasks = _reference(session, import_id, page.FAILURES_READ)
            assert not capped
            assert shown == (failures, thumbnails, tasks)
            assert len(tasks) == page.SHOWN_TASKS and len(thumbnails) == page.SHOWN_THUMBNAILS
            assert len(failures) > 3 and any(f[3] > page.TASKS_PER_FAILURE for f in failures)

    monkeypatch.setattr(page, "FAILURES_READ", 25)  # more failed tasks than read: the first 25 by id
    with db.transaction() as session:
        for import_id in ids.values():
            shown, capped = _shown(session, import_id)
            assert capped and sum(f[3] for f in shown[0]) == 25
            assert shown[0] == _reference(session, import_id, 25)[0]
