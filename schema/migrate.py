"""Alembic migrations, run programmatically (no alembic.ini needed)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import create_engine, pool

MIGRATIONS = Path(__file__).parent / "migrations"
# Our revision ids are numbered in order ("0016", an optional "_slug" after): what lets a build tell a
# later release's revision from a garbled one without having its script.
_NUMBERED = re.compile(r"(\d+)(?:_[A-Za-z0-9_]*)?")


class UnknownRevision(RuntimeError):
    """The database is at a revision this build does not have and that is not numbered after its head:
    no later release wrote it, so nothing here can say what the schema is; refuse to touch it."""


@dataclass(frozen=True)
class Upgrade:
    """What `upgrade_to` found and left: `newer` when the database was at a later release's revision
    (unknown to this build's scripts, numbered past its head), which it leaves alone."""

    before: str | None
    after: str | None
    head: str | None
    newer: bool = False


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def current_revision(database_url: str) -> str | None:
    """The revision the database is at (None: no migration applied yet)."""
    engine = create_engine(database_url, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str | None:
    """The newest revision this code ships."""
    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def later_release(revision: str, head: str | None) -> bool:
    """Whether `revision`, which this build's scripts lack, is numbered after `head`: written by a later
    release's migrations, as when an older build's pod starts while a newer build runs."""
    found, ours = _NUMBERED.fullmatch(revision), _NUMBERED.fullmatch(head or "")
    return bool(found and ours and int(found.group(1)) > int(ours.group(1)))


def _ahead(revision: str, head: str | None) -> Upgrade:
    if not later_release(revision, head):
        raise UnknownRevision(
            f"the ledger's database is at revision {revision!r}, which this build's migrations (head {head}) do not "
            "know and which is not numbered after their head: not a later release's schema; nothing was changed. "
            "Check DATABASE_URL, or restore the database")
    return Upgrade(revision, revision, head, newer=True)


def upgrade_to(database_url: str, revision: str = "head") -> Upgrade:
    """Bring the database to `revision` (safe to repeat and to race: env.py takes an advisory lock).

    A database already at a later release's revision is left alone rather than failing: under Worker
    Versioning an older build's pods keep starting (scale-up, eviction) after a newer release migrated,
    and run this first. That is safe because each release's migrations stay backward compatible with
    the release before (docs/deploy.md, "Rolling deploys"). An unknown revision that is not numbered
    after our head raises UnknownRevision."""
    scripts = ScriptDirectory(str(MIGRATIONS))
    head = scripts.get_current_head()
    known = {script.revision for script in scripts.walk_revisions()}
    before = current_revision(database_url)
    if before is not None and before not in known:
        return _ahead(before, head)
    try:
        upgrade(database_url, revision)
    except CommandError:
        now = current_revision(database_url)  # a newer build's pod may have migrated in between
        if now is not None and now not in known:
            return _ahead(now, head)
        raise
    return Upgrade(before, current_revision(database_url), head)
