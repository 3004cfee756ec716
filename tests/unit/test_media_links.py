"""Signed media links: what a token grants, what it refuses; byte ranges the gateway answers."""

from __future__ import annotations

import pytest

from config.settings import Settings
from delivery.download import file_name
from delivery.export import ExportRow
from delivery.links import LinkError, LinkSigner
from gateway.media import _range
from gateway.problems import ProblemError

KEY = "tenants/t/tasks/abc/hls/v1/index.m3u8"
NOW = 1_800_000_000.0


def signer(secret: str = "media-link-secret", previous: str = "") -> LinkSigner:
    return LinkSigner(secret.encode(), "http://gw.example/", previous.encode())


def _token(url: str) -> str:
    return url.split("/media/", 1)[1].split("/")[0]


def test_a_link_opens_its_file_and_its_neighbours_until_it_expires():
    link = signer().link(KEY, 60, now=NOW)
    assert link.url.startswith("http://gw.example/media/") and link.url.endswith("/index.m3u8")
    assert link.expires_at.timestamp() == NOW + 60
    token = _token(link.url)
    assert signer().key_for(token, "index.m3u8", now=NOW) == KEY
    assert signer().key_for(token, "seg_0003.ts", now=NOW + 59) == "tenants/t/tasks/abc/hls/v1/seg_0003.ts"
    with pytest.raises(LinkError, match="expired"):
        signer().key_for(token, "index.m3u8", now=NOW + 61)


def test_forged_tampered_or_foreign_tokens_are_refused():
    token = _token(signer().link(KEY, 60, now=NOW).url)
    body, sig = token.split(".")
    other = _token(signer().link("tenants/u/tasks/x/hls/v1/index.m3u8", 60, now=NOW).url)
    for bad in (f"{other.split('.')[0]}.{sig}", f"{body}.{sig[:-2]}AA", body, "", "a.b.c"):
        with pytest.raises(LinkError):
            signer().key_for(bad, "index.m3u8", now=NOW)
    with pytest.raises(LinkError):  # signed with another key
        signer("another-secret").key_for(token, "index.m3u8", now=NOW)


@pytest.mark.parametrize("name", ["../raw/1.mp4", "..", ".hidden", "a/b.ts", "", "x" * 300])
def test_a_token_never_reaches_outside_its_folder(name):
    token = _token(signer().link(KEY, 60, now=NOW).url)
    with pytest.raises(LinkError):
        signer().key_for(token, name, now=NOW)


def test_no_key_is_derived_from_the_s3_secret(monkeypatch, tmp_path):
    """The public default S3 secret used to key media links; now only the media-link secret does."""
    monkeypatch.setenv("REELQUEUE_HOME", str(tmp_path))
    public = Settings(s3_secret_key="reelqueue-secret", media_link_secret="")
    with pytest.raises(LinkError, match="REELQUEUE_MEDIA_LINK_SECRET"):
        LinkSigner.from_settings(public).link(KEY, 60)
    forged = _token(LinkSigner(b"reelqueue-secret", "http://gw.example/").link(KEY, 60, now=NOW).url)
    with pytest.raises(LinkError):
        LinkSigner.from_settings(public).key_for(forged, "index.m3u8", now=NOW)
    own = Settings(s3_secret_key="reelqueue-secret", media_link_secret="m" * 16 + "edia-link-secret-0123")
    assert LinkSigner.from_settings(own).key_for(
        _token(LinkSigner.from_settings(own).link(KEY, 60, now=NOW).url), "index.m3u8", now=NOW) == KEY


def test_during_a_change_of_key_links_of_the_previous_key_still_open():
    old = _token(signer("old-key").link(KEY, 60, now=NOW).url)
    rotated = signer("new-key", previous="old-key")
    assert rotated.key_for(old, "index.m3u8", now=NOW) == KEY
    assert rotated.key_for(_token(rotated.link(KEY, 60, now=NOW).url), "index.m3u8", now=NOW) == KEY
    assert _token(rotated.link(KEY, 60, now=NOW).url) == _token(signer("new-key").link(KEY, 60, now=NOW).url)
    with pytest.raises(LinkError):  # once the previous key is dropped, its links close
        signer("new-key").key_for(old, "index.m3u8", now=NOW)


@pytest.mark.parametrize("token", ["é.ü", "abc.ü", "ü", "\x00.\x00", "a.%ff"])
def test_non_ascii_or_malformed_tokens_are_refused_not_crashed(token):
    with pytest.raises(LinkError):
        signer().key_for(token, "index.m3u8", now=NOW)


@pytest.mark.parametrize("header, expected", [
    (None, (0, 100, 200)), ("bytes=0-9", (0, 10, 206)), ("bytes=90-", (90, 10, 206)),
    ("bytes=-5", (95, 5, 206)), ("bytes=50-500", (50, 50, 206)), ("items=0-1", (0, 100, 200)),
    ("bytes=0-1,5-6", (0, 100, 200)),
])
def test_ranges(header, expected):
    assert _range(header, 100) == expected


def test_a_range_past_the_end_is_refused():
    with pytest.raises(ProblemError) as info:
        _range("bytes=100-", 100)
    assert info.value.problem.status == 416


def test_download_file_names_are_safe_and_unique_per_task():
    row = ExportRow(task_id="0123456789abcdef", product_id="../SKU 1/ä", locale="de-DE", aspect_ratio="9:16",
                    variant="hook-a", template_id="showcase", template_version="v1", object_key="k", sha256="0" * 64,
                    size_bytes=1, duration_s=1.0, width=1, height=1, urls_expire_at="2030-01-01T00:00:00Z")
    name = file_name(row)
    assert name == "SKU-1_showcase_de-DE_9x16_hook-a_01234567.mp4"
    assert "/" not in name and ".." not in name
