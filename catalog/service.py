"""Wires the importer to the configured database, object storage and fetcher."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from adapters.storage import ObjectStorage
from catalog.images import ImageResolver, image_fetcher
from catalog.importer import CatalogImporter, ImportOptions, ImportSummary
from catalog.plan import Plan
from config.settings import Settings
from schema.db import Database
from schema.queries import import_exists


class UnknownImport(LookupError):
    pass


def run_import(
    settings: Settings, file: Path, plan: Plan, *, catalog: str | None = None, dry_run: bool = False,
    supersedes: str | None = None, check_urls: bool = True, tenant: str | None = None,
    on_image: Callable[[], None] | None = None,
) -> ImportSummary:
    """`reelqueue import` and `POST /v1/imports`: `tenant` defaults to the configured one (the CLI's)."""
    tenant = tenant or settings.tenant
    fetcher = image_fetcher(settings)
    db = None if dry_run else Database(settings.database_url)
    storage = None if dry_run else ObjectStorage.from_settings(settings)
    if db is not None and supersedes:
        with db.transaction() as session:
            if not import_exists(session, supersedes, tenant):
                raise UnknownImport(f"--supersedes names no import: {supersedes}")
    importer = CatalogImporter(db, storage, lambda st, base: ImageResolver(fetcher, st, tenant, base))
    opts = ImportOptions(
        tenant=tenant, credit_limit=settings.tenant_credit_limit, catalog=catalog, dry_run=dry_run,
        supersedes=supersedes, check_urls=check_urls, reports_dir=settings.home.resolve() / "reports",
    )
    return importer.run(file, plan, opts, on_image)
