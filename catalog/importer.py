"""Import a catalog file with a plan: immutable, versioned import -> products -> deterministic tasks.

Phases, so that no external call happens inside a database transaction and nothing is
half-written:
1. read + validate + resolve images (object storage writes are content-addressed, repeatable),
   spooling normalized products to a temporary file (constant memory for large catalogs);
2. one transaction: import row, products, issues, tasks (existing tasks are reused, not
   duplicated), all in batches.

With URL checks off nothing in phase 1 calls out, so the two phases become one stream
(`_streamed`): the transaction opens first and the file is read, validated and expanded while the
rows already built are COPYed (the server worked only after the whole file was read and spooled).
A product with a local image to store (an external call) or a stop-the-import issue rolls that
transaction back (nothing is written) and the import runs in the two phases above.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from adapters.storage import ObjectStorage, file_sha256
from catalog.bulk import copy_text, insert_products, insert_tasks, lock_catalog
from catalog.expand import (
    Combination,
    Expanded,
    check_plan_locales,
    combinations,
    copy_issues,
    expand_product,
    overlay_json,
)
from catalog.images import (
    ImageOutcome,
    ImageResolver,
    image_business_key,
    is_url,
    record_image_asset,
    url_identity,
)
from catalog.plan import Plan
from catalog.readers import CatalogRead, read_catalog
from catalog.records import Issue, IssueAction, ProductRecord
from catalog.report import write_report
from contracts.task import TaskStatus
from contracts.workflow_api import workflow_id
from schema.assets import asset_id_for
from schema.db import Database
from schema.models import CatalogImport, Tenant, ValidationIssue
from schema.models import Plan as PlanRow

BATCH = 500
WRITER_SWITCH_INTERVAL_S = 0.0002
IMAGE_WORKERS = 32


class ImportSummary(BaseModel):
    import_id: str | None
    catalog: str
    file_sha256: str
    format: str
    status: str  # ACCEPTED / REJECTED / DRY_RUN
    version: int | None = None
    rows: int
    products: int
    invalid_rows: int
    tasks: int
    tasks_new: int
    tasks_reused: int
    already_imported: bool = False
    previous_import: str | None = None
    supersedes: str | None = None
    report: str | None = None
    report_csv: str | None = None
    issues_by_action: dict[str, int] = {}


class ImportRejected(Exception):
    """A stop-the-import issue (empty or duplicated product id): exit 2, report written."""

    def __init__(self, summary: ImportSummary):
        super().__init__(f"import rejected: see the report {summary.report}")
        self.summary = summary


class ImportOptions(BaseModel):
    tenant: str
    credit_limit: float
    catalog: str | None = None
    dry_run: bool = False
    supersedes: str | None = None
    check_urls: bool = True
    reports_dir: Path


class _Prepared(BaseModel):
    """One product after phase 1, as spooled to disk."""

    record: ProductRecord
    image: ImageOutcome | None
    image_sha256: str
    makes_tasks: bool


def import_id_for(tenant: str, catalog: str, file_sha: str, plan_id: str) -> str:
    return "imp_" + hashlib.sha256(f"{tenant}\n{catalog}\n{file_sha}\n{plan_id}".encode()).hexdigest()[:20]


class CatalogImporter:
    def __init__(self, db: Database | None, storage: ObjectStorage | None, resolver_factory):  # noqa: ANN001
        self.db = db
        self.storage = storage
        self.resolver_factory = resolver_factory  # (storage | None, base_dir) -> ImageResolver

    def run(self, path: Path, plan: Plan, opts: ImportOptions,
            on_image: Callable[[], None] | None = None) -> ImportSummary:
        """`on_image` is told after each image is checked (a progress bar)."""
        path = Path(path)
        file_sha, _ = file_sha256(path)
        catalog = opts.catalog or plan.catalog.name or path.stem
        import_id = import_id_for(opts.tenant, catalog, file_sha, plan.plan_id)
        if not opts.dry_run:
            existing = self._existing(import_id)
            if existing is not None:
                return existing
        storage = None if opts.dry_run else self.storage
        reading = _Reading(path, plan, opts, catalog, file_sha, import_id)
        if not opts.dry_run and not opts.check_urls:
            raw = self._store_raw(path, opts, file_sha)
            try:
                return self._streamed(reading, raw)
            except _TwoPhases:
                pass  # rolled back: nothing of it was written
        read = reading.open()
        issues: list[Issue] = check_plan_locales(plan)
        resolver: ImageResolver = self.resolver_factory(storage, path.parent)
        with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as spool:
            self._prepare(read.products, plan, opts, resolver, issues, spool, on_image)
            issues.extend(read.issues)
            summary = reading.summary(read, issues)
            stop = _stops(issues)
            if opts.dry_run:
                spool.seek(0)
                combos = combinations(plan)
                summary.tasks = sum(len(_expand(p, combos, opts.tenant, catalog))
                                    for p in _read_spool(spool) if p.makes_tasks)
                summary.tasks_new = summary.tasks
                if stop:
                    raise ImportRejected(summary)
                return summary
            raw_key = self._store_raw(path, opts, file_sha)
            spool.seek(0)
            with self.db.transaction() as session:
                row = self._open_import(session, summary, path, raw_key, plan, opts)
                _record_issues(session, row, issues)
                if not stop:
                    self._write_tasks(session, row, plan, opts.tenant, summary, _read_spool(spool))
                row.tasks, row.tasks_new, row.tasks_reused = summary.tasks, summary.tasks_new, summary.tasks_reused
        if stop:
            raise ImportRejected(summary)
        return summary

    def _store_raw(self, path: Path, opts: ImportOptions, file_sha: str) -> str:
        """The file as uploaded, under its content's hash (a repeated put writes the same bytes)."""
        raw_key = f"tenants/{opts.tenant}/catalogs/raw/{file_sha}{path.suffix.lower()}"
        if self.storage.stat(raw_key) is None:
            self.storage.put_file(raw_key, path, "text/csv")
        return raw_key

    def _streamed(self, reading: _Reading, raw_key: str) -> ImportSummary:
        """Phases 1 and 2 as one stream in one transaction (URL checks off). _TwoPhases (after a
        rollback) when a product needs its image stored or the file stops the import."""
        read, plan, opts = reading.open(), reading.plan, reading.opts
        issues: list[Issue] = check_plan_locales(plan)
        if _stops(issues):
            raise _TwoPhases
        summary = reading.provisional(read)

        def prepared() -> Iterator[_Prepared]:
            for product in read.products:
                if read.stop_import or _needs_image(product, opts):
                    raise _TwoPhases
                yield self._prepared(product, None, plan, issues)
            if read.stop_import:
                raise _TwoPhases

        with self.db.transaction() as session:
            row = self._open_import(session, summary, reading.path, raw_key, plan, opts)
            self._write_tasks(session, row, plan, opts.tenant, summary, prepared())
            issues.extend(read.issues)
            final = reading.summary(read, issues)
            if final.status != "ACCEPTED":
                raise _TwoPhases
            final.version, final.previous_import = summary.version, summary.previous_import
            final.tasks, final.tasks_new, final.tasks_reused = summary.tasks, summary.tasks_new, summary.tasks_reused
            row.rows, row.products, row.invalid_rows = final.rows, final.products, final.invalid_rows
            row.report_key = final.report
            row.tasks, row.tasks_new, row.tasks_reused = final.tasks, final.tasks_new, final.tasks_reused
            _record_issues(session, row, issues)
        return final

    # phase 1 -------------------------------------------------------------------------------
    def _prepare(
        self, products: Iterator[ProductRecord], plan: Plan, opts: ImportOptions, resolver: ImageResolver,
        issues: list[Issue], spool, on_image: Callable[[], None] | None = None,  # noqa: ANN001 - text file
    ) -> None:
        with ThreadPoolExecutor(IMAGE_WORKERS) as pool:
            while batch := list(islice(products, BATCH)):
                # only products with an image to resolve go to the pool (none when URL checks are off)
                todo = [i for i, p in enumerate(batch) if _needs_image(p, opts)]
                images: list[ImageOutcome | None] = [None] * len(batch)
                for i, image in zip(todo, pool.map(lambda i: resolver.resolve(batch[i].main_image), todo),
                                    strict=True):
                    images[i] = image
                    if on_image is not None:
                        on_image()
                for product, image in zip(batch, images, strict=True):
                    spool.write(self._prepared(product, image, plan, issues).model_dump_json() + "\n")

    @staticmethod
    def _prepared(product: ProductRecord, image: ImageOutcome | None, plan: Plan, issues: list[Issue]) -> _Prepared:
        row = product.rows[0] if product.rows else None
        product_issues = copy_issues(product, plan)
        if product.main_image is None:
            product_issues.append(Issue(row=row, product_id=product.product_id, field="image_url",
                                        reason="main image missing", action=IssueAction.ROW_INVALID))
        elif image is not None and image.sha256 is None:
            product_issues.append(Issue(
                row=row, product_id=product.product_id, field="image_url", value=product.main_image,
                reason=image.error or "image unusable",
                action=IssueAction.ROW_INVALID if image.invalid else IssueAction.HUMAN_REVIEW,
            ))
        issues.extend(product_issues)
        sha = image.sha256 if image and image.sha256 else url_identity(product.main_image or "")
        return _Prepared(record=product, image=image, image_sha256=sha, makes_tasks=not product_issues)

    # phase 2 -------------------------------------------------------------------------------
    @staticmethod
    def _open_import(session: Session, summary: ImportSummary, path: Path, raw_key: str, plan: Plan,
                     opts: ImportOptions) -> CatalogImport:
        """Lock the catalog, make sure tenant and plan exist, insert the import row (next version)."""
        lock_catalog(session, opts.tenant, summary.catalog)  # before the version is read, held to commit
        _ensure_tenant(session, opts.tenant, opts.credit_limit)
        session.execute(insert(PlanRow).values(id=plan.plan_id, tenant_id=opts.tenant, name=plan.name,
                                               content=plan.model_dump(mode="json"))
                        .on_conflict_do_nothing(index_elements=["id"]))
        previous = session.scalar(
            select(CatalogImport).where(CatalogImport.tenant_id == opts.tenant,
                                        CatalogImport.catalog == summary.catalog)
            .order_by(CatalogImport.version.desc()).limit(1)
        )
        summary.version = (previous.version + 1) if previous else 1
        summary.previous_import = previous.id if previous else None
        row = CatalogImport(
            id=summary.import_id, tenant_id=opts.tenant, catalog=summary.catalog, version=summary.version,
            file_name=path.name, file_sha256=summary.file_sha256, raw_key=raw_key,
            detected_format=summary.format, plan_id=plan.plan_id, status=summary.status, rows=summary.rows,
            products=summary.products, invalid_rows=summary.invalid_rows, report_key=summary.report,
            previous_id=summary.previous_import, supersedes_id=opts.supersedes,
        )
        session.add(row)
        session.flush()
        return row

    def _write_tasks(
        self, session: Session, imp: CatalogImport, plan: Plan, tenant: str, summary: ImportSummary,
        products: Iterable[_Prepared],
    ) -> None:
        """Products and tasks, batch by batch. Building a batch's rows (expansion, hashing, JSON) is
        Python work and writing the previous one is mostly the server's, so they overlap: one writer
        thread uses the session (never two at once), this thread builds the next batch meanwhile."""
        lines = _TaskLines(imp, combinations(plan))
        with _prompt_handoffs(), ThreadPoolExecutor(1, thread_name_prefix="import-writer") as writer:
            pending = None
            for chunk in _chunks(products, BATCH):
                batch = self._build_batch(imp, chunk, lines, tenant)
                if pending is not None:
                    pending.result()
                pending = writer.submit(self._write_batch, session, imp, batch, summary)
            if pending is not None:
                pending.result()

    @staticmethod
    def _build_batch(imp: CatalogImport, chunk: list[_Prepared], lines: _TaskLines, tenant: str) -> _Batch:
        batch = _Batch()
        for p in chunk:
            asset_id = None
            if p.image and p.image.key:
                business_key = image_business_key(tenant, p.image.sha256)
                asset_id = asset_id_for(business_key)
                batch.images[business_key] = p.image
            batch.products.append(_product_row(imp, p, asset_id))
            tasks = _expand(p, lines.combinations, tenant, imp.catalog) if p.makes_tasks else []
            batch.tasks.append(lines.of_product(p, asset_id, tasks))
        return batch

    def _write_batch(self, session: Session, imp: CatalogImport, batch: _Batch, summary: ImportSummary) -> None:
        for image in batch.images.values():
            record_image_asset(session, self.storage.bucket, imp.tenant_id, image)
        product_refs = insert_products(session, batch.products)
        rows = [(task_id, f"{ref}\t{line}") for ref, tasks in zip(product_refs, batch.tasks, strict=True)
                for task_id, line in tasks]
        if not rows:
            return
        new = insert_tasks(session, imp.id, rows, may_exist=imp.previous_id is not None)
        summary.tasks += len(rows)
        summary.tasks_new += new
        summary.tasks_reused += len(rows) - new

    def _existing(self, import_id: str) -> ImportSummary | None:
        with self.db.transaction() as session:
            return import_summary(session, import_id)


class _TwoPhases(Exception):
    """The streamed import cannot finish in one pass: run it in two phases (nothing was written)."""


@dataclass
class _Reading:
    """One import's file and options: opens the reader, builds the summary and writes the report."""

    path: Path
    plan: Plan
    opts: ImportOptions
    catalog: str
    file_sha: str
    import_id: str

    def open(self) -> CatalogRead:
        columns = self.plan.catalog
        return read_catalog(self.path, mapping=columns.columns, default_currency=columns.default_currency)

    def provisional(self, read: CatalogRead) -> ImportSummary:
        """The summary before the file is read (counts 0): what the import row starts with."""
        return ImportSummary(
            import_id=self.import_id, catalog=self.catalog, file_sha256=self.file_sha, format=read.format,
            status="ACCEPTED",
            rows=0, products=0, invalid_rows=0, tasks=0, tasks_new=0, tasks_reused=0, supersedes=self.opts.supersedes,
        )

    def summary(self, read: CatalogRead, issues: list[Issue]) -> ImportSummary:
        """The summary of a read file, its report written (`read.products` exhausted)."""
        stop = _stops(issues)
        dry_run = self.opts.dry_run
        summary = ImportSummary(
            import_id=None if dry_run else self.import_id, catalog=self.catalog, file_sha256=self.file_sha,
            format=read.format, status="DRY_RUN" if dry_run else ("REJECTED" if stop else "ACCEPTED"),
            rows=read.rows, products=read.products_seen, invalid_rows=_invalid_rows(issues), tasks=0, tasks_new=0,
            tasks_reused=0, supersedes=self.opts.supersedes, issues_by_action=_by_action(issues),
        )
        name = self.import_id if not dry_run else f"dry-run-{self.file_sha[:12]}"
        summary.report, summary.report_csv = (str(p) for p in write_report(self.opts.reports_dir / name,
                                                                             summary, issues))
        return summary


def _record_issues(session: Session, row: CatalogImport, issues: list[Issue]) -> None:
    for chunk in _chunks(issues, BATCH):
        session.execute(insert(ValidationIssue), [
            {"import_id": row.id, **i.model_dump(mode="json", include={"row", "product_id", "field", "value",
                                                                      "reason", "action"})}
            for i in chunk
        ])


def import_summary(session: Session, import_id: str) -> ImportSummary | None:
    """The summary of a stored import, as a repeated `reelqueue import` of it prints (nothing new)."""
    imp = session.get(CatalogImport, import_id)
    if imp is None:
        return None
    by_action = dict(session.execute(
        select(ValidationIssue.action, func.count()).where(ValidationIssue.import_id == import_id)
        .group_by(ValidationIssue.action)
    ).all())
    return ImportSummary(
        import_id=imp.id, catalog=imp.catalog, file_sha256=imp.file_sha256, format=imp.detected_format,
        status=imp.status, version=imp.version, rows=imp.rows, products=imp.products,
        invalid_rows=imp.invalid_rows, tasks=imp.tasks, tasks_new=0, tasks_reused=imp.tasks,
        already_imported=True, previous_import=imp.previous_id, supersedes=imp.supersedes_id,
        report=imp.report_key, report_csv=str(Path(imp.report_key).with_suffix(".csv")) if imp.report_key else None,
        issues_by_action=by_action,
    )


_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)  # one encoder, not one per call
_CANONICAL = json.JSONEncoder(sort_keys=True)  # content_sha256 of a product (as json.dumps(sort_keys=True))


@dataclass
class _Batch:
    """One batch's rows, built without the database: products (PRODUCT_COLUMNS without `id`), each
    product's tasks (id, COPY line without the leading `product_ref`, which the writer adds once the
    product has its id), the input images to record as assets."""

    products: list[tuple] = field(default_factory=list)
    tasks: list[list[tuple[str, str]]] = field(default_factory=list)
    images: dict[str, ImageOutcome] = field(default_factory=dict)


def _product_row(imp: CatalogImport, p: _Prepared, image_asset_id: str | None) -> tuple:
    r = p.record
    data = r.model_dump(mode="json")
    return (
        imp.id, imp.tenant_id, imp.plan_id, r.product_id, r.title, r.description, r.main_image, image_asset_id,
        r.price, r.currency, r.category, _JSON.encode(data),
        hashlib.sha256(_CANONICAL.encode(data).encode()).hexdigest(),
    )


class _TaskLines:
    """COPY text lines of an import's tasks (bulk.TASK_COLUMNS after `product_ref`). What a
    combination, a product or the import fixes is formatted once; per task only its id, identity,
    workflow id and (shared by the ratios of a product) prompt and overlay."""

    def __init__(self, imp: CatalogImport, combos: list[Combination]):
        self.combinations = combos
        import_part = "\t".join(copy_text(v) for v in (imp.tenant_id, imp.id, imp.plan_id, TaskStatus.CREATED.value,
                                                        0, 0, 0))
        self._tails = {
            id(c): "\t".join(copy_text(v) for v in (
                c.template.id, c.template.version, c.locale, c.aspect_ratio, c.variant.id, c.template.duration_s,
                c.template.provider, c.template.model, c.template.cost_estimate)) + "\t" + import_part + "\n"
            for c in combos
        }

    def of_product(self, p: _Prepared, image_asset_id: str | None, tasks: list[Expanded]) -> list[tuple[str, str]]:
        product = "\t".join(copy_text(v) for v in (p.record.product_id, p.image_sha256, image_asset_id))
        texts: dict[int, tuple[str, str, str]] = {}  # id(overlay) -> (its prompt, prompt and overlay as COPY text)
        out = []
        for t in tasks:
            text = texts.get(id(t.overlay))
            if text is None or text[0] is not t.prompt:
                text = texts[id(t.overlay)] = (t.prompt, copy_text(t.prompt), copy_text(overlay_json(t.overlay)))
            out.append((t.id, f"{t.id}\t{copy_text(t.identity_json)}\t{workflow_id(t.id)}\t{text[1]}\t"
                              f"{t.prompt_sha256}\t{text[2]}\t{product}\t{self._tails[id(t.combination)]}"))
        return out


@contextmanager
def _prompt_handoffs() -> Iterator[None]:
    """A shorter GIL switch interval while the writer runs (0.2 ms instead of 5). The writer blocks
    on the server at every round trip and COPY chunk and then needs the GIL back from the busy
    building thread; at 5 ms per handoff the server sat idle a quarter of the time, waiting for
    the client (pg_stat_activity sampled during the import). Restored afterwards."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(WRITER_SWITCH_INTERVAL_S)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _expand(p: _Prepared, combos: list[Combination], tenant: str, catalog: str) -> list[Expanded]:
    return expand_product(p.record, combos, tenant=tenant, catalog=catalog, image_sha256=p.image_sha256)


def _needs_image(product: ProductRecord, opts: ImportOptions) -> bool:
    source = product.main_image
    return source is not None and (opts.check_urls or not is_url(source))


def _ensure_tenant(session: Session, tenant: str, credit_limit: float) -> None:
    session.execute(insert(Tenant).values(id=tenant, name=tenant, credit_limit=credit_limit)
                    .on_conflict_do_nothing(index_elements=["id"]))


def _read_spool(spool) -> Iterator[_Prepared]:  # noqa: ANN001 - text file
    for line in spool:
        yield _Prepared.model_validate_json(line)


def _chunks(items: Iterable, size: int) -> Iterator[list]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def _stops(issues: list[Issue]) -> bool:
    return any(i.action is IssueAction.STOP_IMPORT for i in issues)


def _invalid_rows(issues: list[Issue]) -> int:
    invalid = {IssueAction.ROW_INVALID, IssueAction.STOP_IMPORT}
    return len({(i.row, i.product_id) for i in issues if i.action in invalid})


def _by_action(issues: list[Issue]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in issues:
        out[i.action.value] = out.get(i.action.value, 0) + 1
    return out
