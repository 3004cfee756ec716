"""The background sha256 (adapters/hashing.py) and the hashing reader of streamed uploads."""

from __future__ import annotations

import hashlib
import random
import threading

import pytest

from adapters.hashing import BackgroundSha256
from adapters.storage import _HashingReader

DATA = random.Random(3).randbytes(3 * 1024 * 1024 + 17)


def _pieces(data: bytes, sizes: list[int]) -> list[bytes]:
    out, at = [], 0
    while at < len(data):
        size = sizes[len(out) % len(sizes)]
        out.append(data[at:at + size])
        at += size
    return out


@pytest.mark.parametrize("sizes", [[1], [7, 0, 65_536, 3], [1024 * 1024], [5_000_000]])
def test_digest_is_the_sha256_of_the_bytes_in_order(sizes: list[int]) -> None:
    data = DATA if sizes != [1] else DATA[:20_000]
    with BackgroundSha256(batch=100_000, depth=2) as digest:
        for piece in _pieces(data, sizes):
            digest.update(piece)
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()


def test_hashing_thread_ends_on_error() -> None:
    with pytest.raises(RuntimeError), BackgroundSha256() as digest:
        digest.update(b"x" * 10)
        raise RuntimeError("the producer failed")
    assert not [t for t in threading.enumerate() if t.name == "sha256"]


@pytest.mark.parametrize("reads", [[8 * 1024 * 1024], [1, 5, 100_000, -1], [-1]])
def test_hashing_reader_hands_out_every_byte_once(reads: list[int]) -> None:
    with _HashingReader(iter(_pieces(DATA, [65_536, 10, 300_000]))) as reader:
        got = []
        for n in reads * 4:
            got.append(reader.read(n))
    assert b"".join(got) == DATA
    assert reader.size == len(DATA)
    assert reader.sha.hexdigest() == hashlib.sha256(DATA).hexdigest()
