"""`dev up` makes every secret at random and keeps them owner-only (no process started here)."""

from __future__ import annotations

import secrets
import stat
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from config.secrets import problem
from config.settings import Settings
from devstack import postgres
from devstack.paths import StackPaths
from devstack.procs import private_log
from devstack.services import SERVICES
from devstack.stackfile import read_stack, write_stack

OLD_STACK = {  # what an older `dev up` kept: the public defaults
    "s3_access_key": "reelqueue", "s3_secret_key": "reelqueue-secret", "review_secret": "dev-review-secret-change-me",
    "database_url": "postgresql+psycopg://reelqueue@127.0.0.1:5432/reelqueue",
}


@pytest.fixture(autouse=True)
def no_stack_in_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """What `dev up` makes depends on the settings it starts from: not on a stack an earlier test
    (the integration suite, in the same session) pointed the environment at, nor on the one `make demo`
    left in the checkout (its .reelqueue/stack.json, which Settings finds from the current directory)."""
    import os

    for key in list(os.environ):
        if key.startswith("REELQUEUE_") or key in ("DATABASE_URL", "DATABASE_URL_FILE"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("REELQUEUE_HOME", str(tmp_path_factory.mktemp("no-stack")))  # holds no stack.json


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _made(settings: Settings) -> dict[str, object]:
    made: dict[str, object] = {}
    ports = {"postgres": 5999, "s3": 8333, "emulator": 8900, "gateway": 8000}
    for name in ("postgres", "s3", "emulator", "gateway"):
        svc = SERVICES[name]
        made |= svc.settings_for({k: ports.get(k, 1) for k in svc.port_keys}, settings)
    return made


def test_every_secret_is_made_at_random(tmp_path: Path):
    empty = dict.fromkeys(("media_link_secret", "review_secret", "s3_secret_key", "emulator_webhook_secret"), "")
    settings = Settings(home=tmp_path, **empty)  # none given, from any source: each is made
    one, two = _made(settings), _made(settings)
    for field in ("media_link_secret", "review_secret", "s3_secret_key", "emulator_webhook_secret"):
        assert problem(field, str(one[field])) is None, field
        assert one[field] != two[field], field
    password = make_url(str(one["database_url"])).password
    assert password and problem("database_url", password) is None
    assert password != make_url(str(two["database_url"])).password
    assert one["s3_access_key"] != two["s3_access_key"] and len(str(one["s3_access_key"])) == 20
    assert one["media_link_secret"] not in (one["s3_secret_key"], one["review_secret"])


def test_usable_secrets_of_a_stack_are_kept_and_old_placeholders_replaced(tmp_path: Path):
    kept = _made(Settings(home=tmp_path))
    again = _made(Settings(home=tmp_path, **{k: v for k, v in kept.items() if k != "fetch_http_hosts"}))
    for field in ("media_link_secret", "review_secret", "s3_secret_key", "s3_access_key", "database_url",
                  "emulator_webhook_secret"):
        assert again[field] == kept[field], field
    old = _made(Settings(home=tmp_path, **OLD_STACK))
    assert old["s3_secret_key"] != "reelqueue-secret" and old["review_secret"] != "dev-review-secret-change-me"
    assert old["s3_access_key"] != "reelqueue" and make_url(str(old["database_url"])).password


def test_stack_json_logs_and_folders_are_owner_only(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    (home / "logs").mkdir(mode=0o755)
    old_log = home / "logs" / "gateway.log"
    old_log.write_text("from an older version\n")
    old_log.chmod(0o644)
    paths = StackPaths(home)
    write_stack(paths, {"settings": {"review_secret": "x"}, "ports": {}})
    assert _mode(paths.stack_file) == 0o600
    assert read_stack(paths)["settings"] == {"review_secret": "x"}
    for folder in (home / "logs", home / "pids", home / "run"):
        assert _mode(folder) == 0o700, folder
    for folder in (home, home / "data"):  # under root: still traversable by the Postgres user, never listable
        assert _mode(folder) & ~0o001 == 0o700, folder
    with private_log(old_log) as out:
        out.write(b"more\n")
    with private_log(home / "logs" / "new.log"):
        pass
    assert _mode(old_log) == 0o600 and _mode(home / "logs" / "new.log") == 0o600


def test_the_postgres_password_is_the_stack_ones_or_new(tmp_path: Path):
    password = "p/w:@ss" + secrets.token_hex(20)  # characters a URL must quote
    url = postgres.database_url(5432, password)
    assert make_url(url).password == password
    assert postgres.password_for(Settings(home=tmp_path, database_url=url)) == password
    fresh = postgres.password_for(Settings(home=tmp_path, database_url=OLD_STACK["database_url"]))
    assert problem("database_url", fresh) is None


@pytest.mark.parametrize("line, trusts", [
    ("host    all             all             127.0.0.1/32            trust", True),
    ("local   all             all                                     trust", True),
    ("# host all all ::1/128 trust", False),
    ("host    all             all             127.0.0.1/32            scram-sha-256", False),
])
def test_an_old_trust_data_dir_is_recognised(line, trusts):
    assert postgres._trusts(line) is trusts
