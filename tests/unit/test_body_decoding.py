"""The bounded streaming decoder: one layer decoded exactly, caps counted on decoded bytes."""

from __future__ import annotations

import gzip
import zlib

import pytest

from adapters.body_decoding import BodyTooLarge, BodyUndecodable, EncodingRefused, content_codings, decoded_chunks

DATA = bytes(range(256)) * 4000


def _pieces(blob: bytes, size: int) -> list[bytes]:
    return [blob[i:i + size] for i in range(0, len(blob), size)]


@pytest.mark.parametrize("coding, blob", [
    (None, DATA),
    ("gzip", gzip.compress(DATA)),
    ("deflate", zlib.compress(DATA)),  # zlib-wrapped, as the RFC says
    ("deflate", zlib.compress(DATA)[2:-4]),  # raw deflate, as many servers send it
])
def test_one_layer_decodes_exactly_in_bounded_chunks(coding: str | None, blob: bytes) -> None:
    chunks = list(decoded_chunks(_pieces(blob, 333), coding, max_bytes=len(DATA), chunk=4096))
    assert b"".join(chunks) == DATA
    assert max(len(c) for c in chunks) <= 4096


def test_concatenated_gzip_members_are_one_body() -> None:
    blob = gzip.compress(b"abc") + gzip.compress(b"def")
    assert b"".join(decoded_chunks([blob], "gzip", max_bytes=100, chunk=2)) == b"abcdef"


def test_decoded_bytes_count_against_the_cap_before_they_are_kept() -> None:
    bomb = gzip.compress(bytes(50 * 1024 * 1024))
    kept = 0
    with pytest.raises(BodyTooLarge, match="decoded body exceeds 1048576"):
        for chunk in decoded_chunks([bomb], "gzip", max_bytes=1024 * 1024, chunk=65536):
            kept += len(chunk)
    assert kept <= 1024 * 1024


@pytest.mark.parametrize("header, why", [
    ("gzip, gzip", "stacked"), ("deflate, gzip", "stacked"), ("br", "unsupported"), ("gzip, zstd", "unsupported"),
])
def test_stacked_and_unknown_encodings_are_refused(header: str, why: str) -> None:
    with pytest.raises(EncodingRefused, match=why):
        content_codings(header)


def test_identity_and_single_layers_are_accepted() -> None:
    assert content_codings(None) == [] and content_codings("identity") == []
    assert content_codings(" GZIP ") == ["gzip"] and content_codings("identity, deflate") == ["deflate"]


@pytest.mark.parametrize("blob", [gzip.compress(DATA)[:500], b"not gzip at all"])
def test_truncated_or_garbage_bodies_are_undecodable(blob: bytes) -> None:
    with pytest.raises(BodyUndecodable):
        list(decoded_chunks([blob], "gzip", max_bytes=len(DATA), chunk=4096))
