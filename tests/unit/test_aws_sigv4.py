"""SigV4 against AWS's published signature test suite (credentials AKIDEXAMPLE, 2015-08-30T12:36:00Z,
us-east-1, service `service`), and the server-side check the emulator's Rekognition dialect runs."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from adapters.aws_sigv4 import Credentials, parse_authorization, sign_request, signing_key, verify

EXAMPLE = Credentials(access_key_id="AKIDEXAMPLE", secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
AT = datetime(2015, 8, 30, 12, 36, tzinfo=UTC)
SCOPE = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request"


@pytest.mark.parametrize(("name", "method", "url", "body", "headers", "signed", "signature"), [
    ("get-vanilla", "GET", "https://example.amazonaws.com/", None, {}, "host;x-amz-date",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-vanilla-query-order-key-case", "GET", "https://example.amazonaws.com/?Param2=value2&Param1=value1", None, {},
     "host;x-amz-date", "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
    ("post-vanilla", "POST", "https://example.amazonaws.com/", None, {}, "host;x-amz-date",
     "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
    ("post-x-www-form-urlencoded", "POST", "https://example.amazonaws.com/", b"Param1=value1",
     {"Content-Type": "application/x-www-form-urlencoded"}, "content-type;host;x-amz-date",
     "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"),
])
def test_the_published_vectors(name, method, url, body, headers, signed, signature):
    request = httpx.Request(method, url, content=body, headers=headers)
    sign_request(request, EXAMPLE, "us-east-1", "service", AT)
    assert request.headers["x-amz-date"] == "20150830T123600Z"
    assert request.headers["authorization"] == f"{SCOPE}, SignedHeaders={signed}, Signature={signature}", name


def test_the_signing_key_of_the_documented_derivation_example():
    # AWS's "deriving the signing key" example: 20120215, us-east-1, iam
    key = signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam")
    assert key.hex() == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"


def _signed(body: bytes = b'{"a":1}') -> httpx.Request:
    request = httpx.Request("POST", "http://127.0.0.1:8900/rekognition/", content=body,
                            headers={"Content-Type": "application/x-amz-json-1.1",
                                     "X-Amz-Target": "RekognitionService.DetectModerationLabels",
                                     "User-Agent": "rewritten-by-a-proxy"})
    sign_request(request, EXAMPLE, "us-east-1", "rekognition", AT)
    return request


def _verified(request: httpx.Request, secret: str = EXAMPLE.secret_access_key, body: bytes | None = None) -> bool:
    auth = parse_authorization(request.headers["authorization"])
    assert auth is not None
    headers = {k.lower(): v for k, v in request.headers.items()}
    return verify(auth, secret, request.method, request.url.path, request.url.query.decode(), headers,
                  request.content if body is None else body)


def test_a_server_verifies_what_a_client_signed_and_nothing_else():
    request = _signed()
    auth = parse_authorization(request.headers["authorization"])
    assert auth is not None and auth.signed_headers == ("content-type", "host", "x-amz-date", "x-amz-target")
    assert (auth.access_key_id, auth.region, auth.service) == ("AKIDEXAMPLE", "us-east-1", "rekognition")
    assert _verified(request)
    assert not _verified(request, secret="another-secret")
    assert not _verified(request, body=b'{"a":2}')
    request.headers["X-Amz-Target"] = "RekognitionService.DetectLabels"
    assert not _verified(request)


@pytest.mark.parametrize("header", [None, "", "Bearer abc", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/2015/us-east-1",
                                    SCOPE + ", SignedHeaders=host, Signature=zz"])
def test_headers_not_of_the_form_are_not_read(header):
    assert parse_authorization(header) is None


def test_session_tokens_are_sent_and_signed():
    request = httpx.Request("GET", "https://example.amazonaws.com/")
    sign_request(request, EXAMPLE.model_copy(update={"session_token": "token-1"}), "us-east-1", "service", AT)
    assert request.headers["x-amz-security-token"] == "token-1"
    assert "x-amz-security-token" in request.headers["authorization"]
