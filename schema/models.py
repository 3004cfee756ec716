"""SQLAlchemy models: Postgres holds the business facts, Temporal holds the execution.

Every idempotency boundary (docs/architecture.md) has its unique constraint here; the constraints, not isolation
levels, are what keep duplicates out (docs/architecture.md, "Idempotency keys").
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONB, Decimal: Numeric(20, 6)}


def _now_column() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


class Tenant(Base):
    __tablename__ = "tenants"
    __table_args__ = (CheckConstraint("max_concurrent >= 1 AND rate_per_minute >= 1", name="ck_tenants_limits"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    credit_limit: Mapped[Decimal]
    # tasks generating at once (its gate, ahead of the providers'); None: no tenant layer (migration 0010)
    max_concurrent: Mapped[int | None] = mapped_column(Integer)
    rate_per_minute: Mapped[int] = mapped_column(Integer, server_default=text("600"))  # API requests
    created_at: Mapped[datetime] = _now_column()


class ApiKey(Base):
    """A tenant's API key: only its sha256 is kept (the key itself is shown once, at issue)."""

    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    key_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))  # the key's first characters, to tell keys apart
    created_at: Mapped[datetime] = _now_column()
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class BrowserSession(Base):
    """A short-lived token a browser holds instead of the API key it was issued for (`POST
    /v1/sessions`): only its sha256 is kept; it ends at `expires_at`, at sign-out, or with its key."""

    __tablename__ = "browser_sessions"
    token_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id"), index=True)
    created_at: Mapped[datetime] = _now_column()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class StreamGateway(Base):
    """A gateway process that holds event streams: its lease, renewed while it lives (migration 0019).
    A gateway whose lease has expired holds nothing, so the streams of a killed process stop counting."""

    __tablename__ = "stream_gateways"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    host: Mapped[str] = mapped_column(String(200))
    started_at: Mapped[datetime] = _now_column()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class StreamLease(Base):
    """How many `GET /v1/events` streams of a tenant one gateway holds: a tenant's open streams are the
    sum over the gateways whose lease is live (schema/stream_leases.py)."""

    __tablename__ = "stream_leases"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    gateway_id: Mapped[str] = mapped_column(ForeignKey("stream_gateways.id", ondelete="CASCADE"), primary_key=True,
                                            index=True)
    streams: Mapped[int] = mapped_column(Integer)


class IdempotencyRecord(Base):
    """One create per (tenant, Idempotency-Key): the request's hash and the first answer, written in
    the create's own transaction; the primary key is the last line against concurrent duplicates."""

    __tablename__ = "idempotency_keys"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_sha256: Mapped[str] = mapped_column(String(64))
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id"))
    response_status: Mapped[int] = mapped_column(Integer)
    response_body: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = _now_column()


class TaskOutbox(Base):
    """A task the API committed; `started_at` is set once its workflow is known to exist. The worker's
    sweeper starts the rows the gateway left (control/outbox.py)."""

    __tablename__ = "task_outbox"
    __table_args__ = (Index("ix_task_outbox_pending", "created_at", postgresql_where=text("started_at IS NULL")),)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id"), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    created_at: Mapped[datetime] = _now_column()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class TenantRateWindow(Base):
    """The tenant's request count in its current one-minute window (one row per tenant)."""

    __tablename__ = "tenant_rate_windows"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    window_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    count: Mapped[int] = mapped_column(Integer)


class ProviderPollBudget(Base):
    """When the next status call to a provider may start (one row per provider with a budget): every
    worker books its turn here with one statement (schema/poll_budget.py)."""

    __tablename__ = "provider_poll_budgets"
    provider: Mapped[str] = mapped_column(String(64), primary_key=True)
    next_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Plan(Base):
    """A production plan, stored once per content hash."""

    __tablename__ = "plans"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of the canonical plan
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    name: Mapped[str] = mapped_column(String(200))
    content: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = _now_column()


class CatalogImport(Base):
    """An immutable, versioned import: the same file with the same plan is the same import."""

    __tablename__ = "catalog_imports"
    __table_args__ = (
        UniqueConstraint("tenant_id", "catalog", "file_sha256", "plan_id"),
        UniqueConstraint("id", "tenant_id", "plan_id", name="uq_catalog_imports_id_tenant_plan"),  # products' key
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    catalog: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(Integer)
    file_name: Mapped[str] = mapped_column(String(500))
    file_sha256: Mapped[str] = mapped_column(String(64))
    raw_key: Mapped[str] = mapped_column(String(500))
    detected_format: Mapped[str] = mapped_column(String(40))
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id"))
    status: Mapped[str] = mapped_column(String(20))  # ACCEPTED / REJECTED
    rows: Mapped[int] = mapped_column(Integer, default=0)
    products: Mapped[int] = mapped_column(Integer, default=0)
    invalid_rows: Mapped[int] = mapped_column(Integer, default=0)
    tasks: Mapped[int] = mapped_column(Integer, default=0)
    tasks_new: Mapped[int] = mapped_column(Integer, default=0)
    tasks_reused: Mapped[int] = mapped_column(Integer, default=0)
    report_key: Mapped[str | None] = mapped_column(String(500))
    previous_id: Mapped[str | None] = mapped_column(ForeignKey("catalog_imports.id"))
    supersedes_id: Mapped[str | None] = mapped_column(ForeignKey("catalog_imports.id"))
    created_at: Mapped[datetime] = _now_column()
    paused_by: Mapped[str | None] = mapped_column(String(200))  # `reelqueue pause`: who (None: running)
    paused_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Product(Base):
    """The normalized snapshot of one product in one import. It carries its import's tenant and plan
    (checked against the import row) so that a task's one foreign key, to its product, covers
    product, import, tenant and plan (migration 0007)."""

    __tablename__ = "products"
    __table_args__ = (
        UniqueConstraint("import_id", "product_id"),
        ForeignKeyConstraint(["import_id", "tenant_id", "plan_id"],
                             ["catalog_imports.id", "catalog_imports.tenant_id", "catalog_imports.plan_id"],
                             name="fk_products_import_tenant_plan"),
        UniqueConstraint("id", "import_id", "tenant_id", "plan_id", name="uq_products_id_import_tenant_plan"),
    )
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    import_id: Mapped[str] = mapped_column(String(40))
    tenant_id: Mapped[str] = mapped_column(String(64))
    plan_id: Mapped[str] = mapped_column(String(64))
    product_id: Mapped[str] = mapped_column(String(300))
    title: Mapped[str] = mapped_column(Text)
    description: Mapped[str] = mapped_column(Text, default="")
    image_url: Mapped[str | None] = mapped_column(Text)
    image_asset_id: Mapped[str | None] = mapped_column(ForeignKey("assets.id"))
    price: Mapped[Decimal | None]
    currency: Mapped[str | None] = mapped_column(String(8))
    category: Mapped[str | None] = mapped_column(Text)
    data: Mapped[dict[str, Any]]
    content_sha256: Mapped[str] = mapped_column(String(64))


class ValidationIssue(Base):
    __tablename__ = "validation_issues"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    import_id: Mapped[str] = mapped_column(ForeignKey("catalog_imports.id"), index=True)
    row: Mapped[int | None] = mapped_column(Integer)
    product_id: Mapped[str | None] = mapped_column(String(300))
    field: Mapped[str] = mapped_column(String(100))
    value: Mapped[str] = mapped_column(Text, default="")
    reason: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(String(40))


class Task(Base):
    """One video to make. `id` is the hash of its canonical identity (catalog.identity).

    Product, import, tenant and plan are checked by one composite foreign key to the product
    (which is checked against its import, which references its tenant and plan): the import
    writes 800,000 tasks at a time, one check per row instead of four (migration 0007)."""

    __tablename__ = "tasks"
    __table_args__ = (
        ForeignKeyConstraint(["product_ref", "import_id", "tenant_id", "plan_id"],
                             ["products.id", "products.import_id", "products.tenant_id", "products.plan_id"],
                             name="fk_tasks_product_import_tenant_plan"),
        Index("ix_tasks_import_id", "import_id"),  # the tasks an import created (schema.import_scope)
        CheckConstraint("version >= 0"),
        Index("ix_tasks_active", "status", postgresql_where=text("status NOT IN "
              "('SUCCEEDED','CANCELED','REJECTED','FAILED_FINAL','EXPIRED')")),
        # the overview page's reads, walked in the order they show (migration 0018, control/overview.py)
        Index("ix_tasks_import_updated", "import_id", text("updated_at DESC"), "id"),
        Index("ix_tasks_import_succeeded", "import_id", text("finished_at DESC NULLS LAST"), "id",
              postgresql_where=text("status = 'SUCCEEDED'")),
        Index("ix_tasks_import_failed", "import_id", "id", postgresql_where=text(
              "status IN ('FAILED_FINAL','EXPIRED','CANCELED','REJECTED','INVALID','NEEDS_ATTENTION')")),
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    # the canonical JSON the id was hashed from, as is (`json`, not `jsonb`: validated, not rebuilt
    # and key-sorted per row, 8 % of the server's import CPU; only ever read back whole)
    identity: Mapped[dict[str, Any]] = mapped_column(JSON)
    import_id: Mapped[str] = mapped_column(String(40))  # the import that created it
    plan_id: Mapped[str] = mapped_column(String(64))
    product_ref: Mapped[int] = mapped_column(BigInteger)
    product_id: Mapped[str] = mapped_column(String(300))
    template_id: Mapped[str] = mapped_column(String(100))
    template_version: Mapped[str] = mapped_column(String(100))
    locale: Mapped[str] = mapped_column(String(20))
    aspect_ratio: Mapped[str] = mapped_column(String(10))
    variant: Mapped[str] = mapped_column(String(100))
    prompt: Mapped[str] = mapped_column(Text)
    prompt_override: Mapped[str | None] = mapped_column(Text)  # a reviewer's edit, used by later attempts
    overlay: Mapped[dict[str, Any]]
    prompt_sha256: Mapped[str] = mapped_column(String(64))
    image_sha256: Mapped[str | None] = mapped_column(String(64))
    image_asset_id: Mapped[str | None] = mapped_column(ForeignKey("assets.id"))
    duration_s: Mapped[Decimal]
    provider: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(100))
    estimated_cost: Mapped[Decimal]
    status: Mapped[str] = mapped_column(String(32))
    version: Mapped[int] = mapped_column(Integer, default=0)
    progress: Mapped[Decimal] = mapped_column(Numeric(5, 4), default=0)
    current_attempt_no: Mapped[int] = mapped_column(Integer, default=0)
    run_no: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))  # +1 per redrive
    # the run asked for quiet progress (migration 0022): the gateway records a signed RUNNING on this row
    # instead of signaling the workflow (schema/quiet_progress.py)
    # deferred, no ORM default: loading or inserting a task does not name it (read where it is needed)
    quiet_progress: Mapped[bool] = mapped_column(server_default=text("false"), deferred=True)
    output_asset_id: Mapped[str | None] = mapped_column(ForeignKey("assets.id"))
    deadline_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    next_retry_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancel_requested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancel_outcome: Mapped[str | None] = mapped_column(String(32))
    last_error_class: Mapped[str | None] = mapped_column(String(32))
    last_error: Mapped[str | None] = mapped_column(Text)
    workflow_id: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = _now_column()
    updated_at: Mapped[datetime] = _now_column()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ImportTask(Base):
    """The tasks an import version reused (they existed before it); the tasks it created are those
    with `tasks.import_id` = the import. schema.import_scope reads both."""

    __tablename__ = "import_tasks"
    import_id: Mapped[str] = mapped_column(ForeignKey("catalog_imports.id"), primary_key=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id"), primary_key=True)
    reused: Mapped[bool] = mapped_column(default=False)


class Attempt(Base):
    """One provider submit: written before the call (SENDING) and after it (ACKED/UNKNOWN/...)."""

    __tablename__ = "attempts"
    __table_args__ = (
        UniqueConstraint("task_id", "attempt_no"),
        UniqueConstraint("provider", "request_key"),
        Index(
            "uq_attempt_provider_job",
            "provider",
            "provider_job_id",
            unique=True,
            postgresql_where=text("provider_job_id IS NOT NULL"),
        ),
    )
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id"))
    attempt_no: Mapped[int] = mapped_column(Integer)
    provider: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(100))
    request_key: Mapped[str] = mapped_column(String(128))
    provider_job_id: Mapped[str | None] = mapped_column(String(256))
    submit_state: Mapped[str] = mapped_column(String(32))
    request_fingerprint: Mapped[str] = mapped_column(String(64))
    http_status: Mapped[int | None] = mapped_column(Integer)
    error_class: Mapped[str | None] = mapped_column(String(32))
    error_message: Mapped[str | None] = mapped_column(Text)
    route_note: Mapped[str | None] = mapped_column(Text)  # its route, and why others were skipped (routing)
    provider_status: Mapped[str | None] = mapped_column(String(32))
    poll_count: Mapped[int] = mapped_column(Integer, default=0)
    usage: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    worker_id: Mapped[str | None] = mapped_column(String(200))
    software_version: Mapped[str | None] = mapped_column(String(40))
    created_at: Mapped[datetime] = _now_column()
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    call_ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # answer or error seen
    acked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = _now_column()


class StateEvent(Base):
    """Append-only history of every accepted transition (and recorded-but-ignored late events)."""

    __tablename__ = "state_events"
    __table_args__ = (UniqueConstraint("source", "source_event_id"),)
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id"), index=True)
    attempt_no: Mapped[int | None] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(40))  # workflow / webhook / polling / cli / gateway
    source_event_id: Mapped[str] = mapped_column(String(300))
    event: Mapped[str] = mapped_column(String(40))
    from_status: Mapped[str] = mapped_column(String(32))
    to_status: Mapped[str] = mapped_column(String(32))
    task_version: Mapped[int] = mapped_column(Integer)
    applied: Mapped[bool] = mapped_column(default=True)
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = _now_column()


class ProviderEvent(Base):
    """Webhook inbox: every verified provider event, stored before anything acts on it.

    `state`: `matched` (its task is known: by the attempt's job id or request key when it came, or
    claimed by the submit or reconcile that recorded its job, `matched_by` says which), `orphan`
    (no attempt had recorded its job yet), `expired` (an orphan nobody claimed within the TTL).
    `payload` is the normalized ProviderUpdate the workflow receives, `raw_body` the body exactly
    as signed; `headers` keeps only the delivery id and timestamp, never the signature.
    """

    __tablename__ = "provider_events"
    __table_args__ = (
        UniqueConstraint("provider", "event_id"),
        CheckConstraint("state IN ('matched','orphan','expired')", name="ck_provider_events_state"),
        Index("ix_provider_events_orphan_job", "provider", "provider_job_id",
              postgresql_where=text("state = 'orphan'")),
        Index("ix_provider_events_orphan_key", "provider", "request_key",
              postgresql_where=text("state = 'orphan'")),
        Index("ix_provider_events_orphan_age", "received_at", postgresql_where=text("state = 'orphan'")),
        Index("ix_provider_events_task", "task_id"),
    )
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    provider: Mapped[str] = mapped_column(String(64))
    event_id: Mapped[str] = mapped_column(String(300))
    verified: Mapped[bool] = mapped_column(default=False)
    provider_job_id: Mapped[str | None] = mapped_column(String(256))
    request_key: Mapped[str | None] = mapped_column(String(300))
    task_id: Mapped[str | None] = mapped_column(ForeignKey("tasks.id"))
    state: Mapped[str] = mapped_column(String(16))
    matched_by: Mapped[str | None] = mapped_column(String(16))  # job_id / request_key / submit / reconcile
    payload: Mapped[dict[str, Any]]
    headers: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    raw_body: Mapped[str | None] = mapped_column(Text)
    observed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # the provider's time
    received_at: Mapped[datetime] = _now_column()
    matched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    signaled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Asset(Base):
    """A stored object we own. `business_key` makes every write repeatable."""

    __tablename__ = "assets"
    __table_args__ = (UniqueConstraint("business_key"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    task_id: Mapped[str | None] = mapped_column(String(64), index=True)
    kind: Mapped[str] = mapped_column(String(20))  # INPUT_IMAGE RAW_OUTPUT PROXY HLS THUMBNAIL CATALOG_RAW REPORT
    business_key: Mapped[str] = mapped_column(String(500))
    bucket: Mapped[str] = mapped_column(String(100))
    key: Mapped[str] = mapped_column(String(500))
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    mime: Mapped[str | None] = mapped_column(String(100))
    duration_s: Mapped[Decimal | None]
    width: Mapped[int | None] = mapped_column(Integer)
    height: Mapped[int | None] = mapped_column(Integer)
    codec: Mapped[str | None] = mapped_column(String(40))
    pipeline_version: Mapped[str | None] = mapped_column(String(20))
    meta: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = _now_column()


class Upload(Base):
    """An asset a client uploads through a presigned URL (`POST /v1/uploads`, schema/uploads.py):
    PENDING until completed, VALIDATING while its bytes are checked in quarantine, then READY (with
    the `assets` row of the checked bytes) or REJECTED with a reason."""

    __tablename__ = "uploads"
    __table_args__ = (
        CheckConstraint("status IN ('PENDING','VALIDATING','READY','REJECTED')", name="ck_uploads_status"),
        CheckConstraint("kind IN ('IMAGE','VIDEO','CATALOG')", name="ck_uploads_kind"),
        CheckConstraint("declared_size > 0", name="ck_uploads_size"),
        Index("ix_uploads_tenant", "tenant_id", "created_at"),
        Index("ix_uploads_open", "expires_at", postgresql_where=text("status IN ('PENDING','VALIDATING')")),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    kind: Mapped[str] = mapped_column(String(16))
    filename: Mapped[str] = mapped_column(String(255))
    declared_size: Mapped[int] = mapped_column(BigInteger)
    declared_type: Mapped[str] = mapped_column(String(100))
    declared_sha256: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    quarantine_key: Mapped[str] = mapped_column(String(500))
    multipart_upload_id: Mapped[str | None] = mapped_column(String(1024))
    part_size: Mapped[int | None] = mapped_column(BigInteger)
    asset_id: Mapped[str | None] = mapped_column(ForeignKey("assets.id"))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _now_column()
    updated_at: Mapped[datetime] = _now_column()


class Rendition(Base):
    """One playable rendition of a raw output (PROXY, HLS, THUMBNAIL) and how making it went.

    The proxy MP4 is what a task needs to succeed; HLS and thumbnail are retried on their own, and
    a FAILED row keeps the error (and ffprobe's verdict for an unreadable input) until a retry
    makes it READY. `asset_id` points at the stored object once READY.
    """

    __tablename__ = "renditions"
    __table_args__ = (
        UniqueConstraint("raw_asset_id", "profile", "pipeline_version"),
        CheckConstraint("profile IN ('PROXY','HLS','THUMBNAIL')"),
        CheckConstraint("status IN ('READY','FAILED')"),
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id"), index=True)
    raw_asset_id: Mapped[str] = mapped_column(ForeignKey("assets.id"))
    profile: Mapped[str] = mapped_column(String(20))
    pipeline_version: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(20))
    asset_id: Mapped[str | None] = mapped_column(ForeignKey("assets.id"))
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    error: Mapped[str | None] = mapped_column(Text)
    error_class: Mapped[str | None] = mapped_column(String(40))
    verdict: Mapped[str | None] = mapped_column(Text)  # ffprobe's words on an unreadable input
    created_at: Mapped[datetime] = _now_column()
    updated_at: Mapped[datetime] = _now_column()
class ReviewCheck(Base):
    """The automatic checks of one proxy rendition (duration, black, frozen, silence, ratio), shown to
    the reviewer; one row per rendition, so a repeated check activity writes nothing new."""

    __tablename__ = "review_checks"
    __table_args__ = (UniqueConstraint("asset_id", name="uq_review_checks_asset"),)
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id"), index=True)
    attempt_no: Mapped[int] = mapped_column(Integer)
    asset_id: Mapped[str] = mapped_column(ForeignKey("assets.id"))
    passed: Mapped[bool]
    results: Mapped[dict[str, Any]]  # {"checks": [{"name", "passed", "detail"}, ...]}
    created_at: Mapped[datetime] = _now_column()


class CreditEntry(Base):
    """Append-only ledger: RESERVE / SETTLE / RELEASE / REFUND / ADJUSTMENT, once per business key."""

    __tablename__ = "credit_ledger"
    __table_args__ = (
        UniqueConstraint("business_key"),
        CheckConstraint("entry_type IN ('RESERVE','SETTLE','RELEASE','REFUND','ADJUSTMENT')"),
        CheckConstraint("amount >= 0 OR entry_type = 'ADJUSTMENT'"),
        # an orphan job's cost (the provider backstop) is an ADJUSTMENT no task or tenant carries
        CheckConstraint("(task_id IS NOT NULL AND tenant_id IS NOT NULL) OR entry_type = 'ADJUSTMENT'",
                        name="ck_credit_ledger_task"),
    )
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"))
    task_id: Mapped[str | None] = mapped_column(ForeignKey("tasks.id"), index=True)
    entry_type: Mapped[str] = mapped_column(String(20))
    amount: Mapped[Decimal]
    business_key: Mapped[str] = mapped_column(String(300))
    attempt_no: Mapped[int | None] = mapped_column(Integer)
    provider_job_id: Mapped[str | None] = mapped_column(String(256))  # the job an ADJUSTMENT pays for
    run_no: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))  # each run balances
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now_column()


class LedgerRunTotal(Base):
    """One task run's ledger figures, kept by a trigger on every ledger insert (migration 0015), so
    the spend query reads a row per run instead of the run's ledger rows. `duplicate`: ADJUSTMENTs of
    stray jobs (schema/strays.py's key, migration 0020); `last_video`: the run's latest
    `...:review:{attempt}` ADJUSTMENT."""

    __tablename__ = "ledger_run_totals"
    task_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_no: Mapped[int] = mapped_column(Integer, primary_key=True)
    reserved: Mapped[Decimal] = mapped_column(server_default=text("0"))
    settled: Mapped[Decimal] = mapped_column(server_default=text("0"))
    released: Mapped[Decimal] = mapped_column(server_default=text("0"))
    refunded: Mapped[Decimal] = mapped_column(server_default=text("0"))
    adjusted: Mapped[Decimal] = mapped_column(server_default=text("0"))
    duplicate: Mapped[Decimal] = mapped_column(server_default=text("0"))
    last_video: Mapped[Decimal | None]
    last_video_attempt: Mapped[int | None] = mapped_column(Integer)


class StrayJob(Base):
    """A provider job no attempt follows: a duplicate found by reconcile, a submit answer that
    arrived after its attempt was concluded, or a job the provider backstop found in the provider's
    listing (an orphan no task knows has no task and no attempt). Cancelled where possible; its cost
    is an ADJUSTMENT."""

    __tablename__ = "stray_jobs"
    __table_args__ = (
        UniqueConstraint("provider", "provider_job_id"),
        CheckConstraint("task_id IS NOT NULL OR found_by = 'backstop'", name="ck_stray_jobs_task"),
    )
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    task_id: Mapped[str | None] = mapped_column(ForeignKey("tasks.id"), index=True)
    attempt_no: Mapped[int | None] = mapped_column(Integer)
    provider: Mapped[str] = mapped_column(String(64))
    provider_job_id: Mapped[str] = mapped_column(String(256))
    found_by: Mapped[str] = mapped_column(String(32))  # reconcile / late_answer / backstop
    request_key: Mapped[str | None] = mapped_column(String(300))
    evidence: Mapped[dict[str, Any] | None] = mapped_column(JSONB)  # the provider's listing of the job
    provider_status: Mapped[str | None] = mapped_column(String(32))
    cost: Mapped[Decimal | None]
    accounted: Mapped[bool] = mapped_column(default=False)  # terminal at the provider, ADJUSTMENT written
    created_at: Mapped[datetime] = _now_column()
    updated_at: Mapped[datetime] = _now_column()


class ModerationJudgement(Base):
    """One moderator's judgement on a task's or an asset's content at a gate (migration 0021). Written
    once per `idempotency_key`, so a retried step records once (schema/moderation_judgements.py)."""

    __tablename__ = "moderation_judgements"
    __table_args__ = (
        UniqueConstraint("idempotency_key", name="uq_moderation_judgements_key"),
        CheckConstraint("subject_kind IN ('task','asset')", name="ck_moderation_judgements_subject"),
        CheckConstraint("content_kind IN ('text','image','video_frames')", name="ck_moderation_judgements_content"),
        CheckConstraint("gate IN ('input','upload','output','provider')", name="ck_moderation_judgements_gate"),
        CheckConstraint("verdict IN ('allow','review','block')", name="ck_moderation_judgements_verdict"),
        CheckConstraint("latency_ms >= 0", name="ck_moderation_judgements_latency"),
        Index("ix_moderation_judgements_subject", "tenant_id", "subject_kind", "subject_id", "created_at"),
    )
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    subject_kind: Mapped[str] = mapped_column(String(8))  # task / asset
    subject_id: Mapped[str] = mapped_column(String(64))
    content_kind: Mapped[str] = mapped_column(String(16))  # text / image / video_frames
    gate: Mapped[str] = mapped_column(String(16))
    moderator: Mapped[str] = mapped_column(String(64))
    model_version: Mapped[str] = mapped_column(String(128))
    verdict: Mapped[str] = mapped_column(String(8))
    categories: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    scores: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    latency_ms: Mapped[int] = mapped_column(Integer)
    evidence: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))  # terms, frames_s, note
    idempotency_key: Mapped[str] = mapped_column(String(300))
    created_at: Mapped[datetime] = _now_column()
