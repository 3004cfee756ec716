"""The image's build context, listed as the builder would send it (.dockerignore applied with Docker's
rules): no secrets file from anywhere in the checkout, and everything `pip install .` needs."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[2]
# A file that holds or may hold a secret: env files, key material, a Temporal profile with its key.
SECRET_FILE = re.compile(r"(^\.env(\..+)?$|\.env$|\.(pem|key|p12|pfx)$|^temporal\.toml$|secret.*\.json$)")


def _regex(pattern: str) -> re.Pattern[str]:
    """One .dockerignore pattern (Go's filepath.Match, plus `**` for any number of directories)."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + "[" + pattern[i + 1:end].replace("!", "^", 1) + "]", end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def _rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(is an exception, pattern) per line, in order: the last one that matches decides."""
    rules = []
    for line in (raw.strip() for raw in text.splitlines()):
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            cleaned = os.path.normpath(line.removeprefix("!").strip()).lstrip("/")
            rules.append((negated, _regex(cleaned)))
    return rules


def context(paths: list[str], dockerignore: str) -> list[str]:
    """The paths the builder sends: a pattern that matches a file or one of its parent folders
    excludes it, unless a later exception (`!`) matches."""
    rules = _rules(dockerignore)
    kept = []
    for path in paths:
        parts = PurePosixPath(path).parts
        candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
        excluded = False
        for negated, rule in rules:
            if any(rule.fullmatch(candidate) for candidate in candidates):
                excluded = not negated
        if not excluded:
            kept.append(path)
    return kept


def _checkout() -> list[str]:
    """Every file under the checkout as it is on disk, tracked or not (a secrets file never is)."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d != ".git"]
        found += [Path(folder, name).relative_to(ROOT).as_posix() for name in files]
    return found


def _secrets(paths: list[str]) -> list[str]:
    return [p for p in paths if SECRET_FILE.search(PurePosixPath(p).name) or "secrets" in PurePosixPath(p).parts]


PLANTED = [".env", ".env.production", "deploy/kubernetes/secrets.env", "deploy/kubernetes/secrets.example.env",
           "config/prod/.env", "ops/tls/client-key.pem", "ops/tls/client.pem", "tenant/a.key", "secrets/db_password",
           "infra/secrets/token", "home/.config/temporalio/temporal.toml", "keys/service-secret.json"]


def test_the_context_holds_no_secrets_file_planted_anywhere() -> None:
    dockerignore = (ROOT / ".dockerignore").read_text()
    assert _secrets(PLANTED) == PLANTED  # each planted name is one the check looks for
    assert context(PLANTED, dockerignore) == []


def test_the_context_of_this_checkout_holds_no_secrets_file() -> None:
    sent = context(_checkout(), (ROOT / ".dockerignore").read_text())
    assert _secrets(sent) == []
    assert not any(p.startswith((".venv/", ".reelqueue/", "tests/")) for p in sent)


def test_the_context_keeps_what_pip_install_needs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = [pattern.rstrip("*") for pattern in project["packages"]["find"]["include"]]
    needed = ["pyproject.toml", "requirements.lock", "docker/Dockerfile", *(f"{m}.py" for m in project["py-modules"])]
    needed += [p for p in _checkout() if p.endswith(".py") and p.split("/")[0] in packages]
    needed += [p.as_posix() for p in (ROOT / "schema" / "migrations").relative_to(ROOT).glob("**/*.mako")]
    assert set(needed) <= set(context(needed, (ROOT / ".dockerignore").read_text()))


def test_the_rules_follow_docker_semantics() -> None:
    """Root-only patterns stay at the root, `**/` reaches every depth, a folder takes its files, `!` re-includes."""
    rules = "secrets\n.env\n**/*.pem\nlogs\n!logs/keep.txt\n"
    paths = ["secrets/a", "deploy/secrets/a", ".env", "a/.env", "a/b/c.pem", "logs/x", "logs/keep.txt"]
    assert context(paths, rules) == ["deploy/secrets/a", "a/.env", "logs/keep.txt"]
