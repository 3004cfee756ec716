"""The SigV4 query signer against the example in AWS's documentation (presigned GET of test.txt),
and the headers it binds."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

from adapters.presign import presign

EXAMPLE = dict(scheme="https", host="examplebucket.s3.amazonaws.com", path="/test.txt",
               access_key="AKIAIOSFODNN7EXAMPLE", secret_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
               region="us-east-1", now=datetime(2013, 5, 24, tzinfo=UTC), expires_s=86400)


def test_the_documented_example_signature() -> None:
    url = presign(method="GET", **EXAMPLE)
    assert url.startswith("https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&")
    query = parse_qs(urlsplit(url).query)
    assert query["X-Amz-Credential"] == ["AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request"]
    assert query["X-Amz-SignedHeaders"] == ["host"]
    assert query["X-Amz-Signature"] == ["aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"]


def test_signed_headers_are_named_and_change_the_signature() -> None:
    bound = presign(method="PUT", headers={"Content-Length": "12", "x-amz-checksum-sha256": "abc="}, **EXAMPLE)
    other = presign(method="PUT", headers={"Content-Length": "13", "x-amz-checksum-sha256": "abc="}, **EXAMPLE)
    query = parse_qs(urlsplit(bound).query)
    assert query["X-Amz-SignedHeaders"] == ["content-length;host;x-amz-checksum-sha256"]
    assert query["X-Amz-Signature"] != parse_qs(urlsplit(other).query)["X-Amz-Signature"]
