"""Embedded PostgreSQL: binaries from PATH or pgserver, an unprivileged user when run as root, a
random password for its role (scram-sha-256; kept in stack.json)."""

from __future__ import annotations

import importlib.util
import os
import pwd
import re
import shutil
import stat
import subprocess
from pathlib import Path

from config.secrets import good_or_new
from config.settings import Settings

from .errors import EMBEDDED_EXTRA, StackError
from .probes import postgres_ok, psycopg_conninfo
from .procs import private_log

SYSTEM_USER = "reelqueue-pg"  # postgres refuses to run as root
ROLE = DATABASE = "reelqueue"
_SOCKET_NAME_LEN = len("/.s.PGSQL.65535")
_SUN_PATH_MAX = 107


def _bin_dirs() -> list[Path]:
    """Candidate directories holding postgres + initdb: PATH first, then pgserver's bundle."""
    dirs: list[Path] = []
    found = shutil.which("postgres")
    if found:
        real = Path(found).resolve().parent
        dirs.append(real if (real / "initdb").exists() else Path(found).parent)
    spec = importlib.util.find_spec("pgserver")
    if spec and spec.submodule_search_locations:
        bundled = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
        if (bundled / "postgres").exists():
            dirs.append(bundled)
    return [d for d in dirs if (d / "postgres").exists() and (d / "initdb").exists()]


def _major(bindir: Path) -> str:
    out = subprocess.run([bindir / "postgres", "--version"], capture_output=True, text=True).stdout
    match = re.search(r"(\d+)(?:\.\d+)?", out)
    return match.group(1) if match else ""


def binaries(pgdata: Path) -> Path:
    """The bin dir to use: one whose major version matches an existing data dir, else the first."""
    dirs = _bin_dirs()
    if not dirs:
        raise StackError("postgres: no postgres/initdb on PATH and pgserver is not installed: "
                         f"{EMBEDDED_EXTRA}, or a PostgreSQL server package")
    version_file = pgdata / "PG_VERSION"
    if version_file.exists():
        wanted = version_file.read_text().strip()
        for d in dirs:
            if _major(d) == wanted:
                return d
        raise StackError(f"postgres: data dir {pgdata} is version {wanted}; no matching binaries")
    return dirs[0]


def system_user() -> tuple[int, int] | None:
    """(uid, gid) to run postgres as when we are root; created with useradd if missing."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SYSTEM_USER],
            check=True,
            capture_output=True,
        )
        entry = pwd.getpwnam(SYSTEM_USER)
    return entry.pw_uid, entry.pw_gid


def _make_traversable(path: Path) -> None:
    """o+x on every ancestor so the unprivileged user can reach its data dir and binaries."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    if root.stat().st_uid == uid:
        return
    for dirpath, _, files in os.walk(root):
        os.chown(dirpath, uid, gid)
        for name in files:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)


def socket_dir(pgdata: Path) -> str:
    """Unix sockets inside the data dir, or none if that path is too long for sun_path."""
    return str(pgdata) if len(str(pgdata)) + _SOCKET_NAME_LEN <= _SUN_PATH_MAX else ""


def password_for(settings: Settings) -> str:
    """The role's password in settings.database_url (stack.json) when usable, else a new one."""
    from sqlalchemy.engine import make_url

    return good_or_new(str(make_url(settings.database_url).password or ""), "database_url")


def prepare(pgdata: Path, log: Path, password: str) -> tuple[Path, tuple[int, int] | None]:
    """Create and initdb the data dir (once), the role with `password`, every connection asked for
    it; returns the bin dir and the user to run as."""
    user = system_user()
    pgdata.mkdir(parents=True, exist_ok=True, mode=0o700)
    bindir = binaries(pgdata)
    if user is not None:
        _chown_tree(pgdata, *user)
        _make_traversable(pgdata)
        _make_traversable(bindir / "postgres")
    if (pgdata / "PG_VERSION").exists():
        return bindir, user
    drop: dict[str, object] = {}
    if user is not None:
        drop = {"user": user[0], "group": user[1], "extra_groups": []}
    pwfile = pgdata.parent / f".{pgdata.name}-initdb-password"
    pwfile.unlink(missing_ok=True)
    with os.fdopen(os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(password + "\n")
    if user is not None:
        os.chown(pwfile, *user)
    cmd = [str(bindir / "initdb"), "-D", str(pgdata), "-U", ROLE, "--auth=scram-sha-256", f"--pwfile={pwfile}",
           "-E", "UTF8", "--no-locale"]
    try:
        with private_log(log) as out:
            done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=pgdata, **drop)  # type: ignore[call-overload]
    finally:
        pwfile.unlink(missing_ok=True)
    if done.returncode != 0:
        raise StackError(f"postgres: initdb failed (exit {done.returncode}), see {log}")
    return bindir, user


def command(bindir: Path, pgdata: Path, port: int) -> list[str]:
    return [
        str(bindir / "postgres"),
        "-D", str(pgdata),
        "-p", str(port),
        "-c", "listen_addresses=127.0.0.1",
        "-c", f"unix_socket_directories={socket_dir(pgdata)}",
        "-c", "max_connections=200",
        # bulk loads (the catalog import writes ~2 GB of heap, index and WAL for 800,000 tasks): room
        # for the tasks' indexes in shared buffers, and no checkpoint in the middle of a load (every
        # index page touched after a checkpoint is logged whole again); docs/performance.md
        "-c", "shared_buffers=256MB",
        "-c", "wal_buffers=16MB",
        "-c", "max_wal_size=4GB",
        "-c", "checkpoint_timeout=15min",
    ]  # fmt: skip


def database_url(port: int, password: str) -> str:
    from urllib.parse import quote

    return f"postgresql+psycopg://{ROLE}:{quote(password, safe='')}@127.0.0.1:{port}/{DATABASE}"


def ensure_password(settings: Settings, pgdata: Path) -> bool:
    """A data dir made before passwords (initdb --auth=trust): give the role the password of
    settings.database_url and ask every connection for it from now on. True if it changed."""
    import psycopg
    from psycopg import sql
    from sqlalchemy.engine import make_url

    hba = pgdata / "pg_hba.conf"
    password = make_url(settings.database_url).password
    if not password or not hba.exists():
        return False
    lines = hba.read_text().splitlines()
    if not any(_trusts(line) for line in lines):
        return False
    with psycopg.connect(psycopg_conninfo(settings.database_url, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("alter role {} password {}").format(sql.Identifier(ROLE), sql.Literal(password)))
        hba.write_text("\n".join(re.sub(r"\btrust\s*$", "scram-sha-256", line) if _trusts(line) else line
                                 for line in lines) + "\n")
        conn.execute("select pg_reload_conf()")
    return True


def _trusts(line: str) -> bool:
    return not line.lstrip().startswith("#") and line.rstrip().endswith("trust")


def ensure_database(settings: Settings) -> bool:
    """Create the database named in settings.database_url if missing; True if it was created."""
    import psycopg
    from psycopg import errors, sql
    from sqlalchemy.engine import make_url

    name = make_url(settings.database_url).database
    if not name:
        raise StackError("postgres: DATABASE_URL names no database")
    try:
        conn = psycopg.connect(psycopg_conninfo(settings.database_url, "postgres"), autocommit=True)
    except psycopg.OperationalError:
        if postgres_ok(settings.database_url):  # no access to the maintenance db, ours exists
            return False
        raise
    with conn:
        if conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
            return False
        try:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        except errors.DuplicateDatabase:
            return False
    return True
