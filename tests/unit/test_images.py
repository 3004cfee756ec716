"""Image resolution rules: one probe per dead host, a per-URL cache, local paths kept inside the catalog folder."""

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from adapters.fetcher import FetchFailed, FetchRefused
from catalog.images import RETRIES, ImageResolver


class CountingFetcher:
    """Stands in for the network: answers from a table and counts calls per URL."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def fetch_to(self, url, sink):
        with self._lock:
            self.calls.append(url)
        return self.behaviour(url, sink)


def dns_down(url, sink):
    raise FetchFailed(f"{url}: DNS lookup failed", retryable=True, dns=True)


def test_a_host_that_does_not_resolve_is_probed_once(tmp_path):
    fetcher = CountingFetcher(dns_down)
    resolver = ImageResolver(fetcher, None, "t", tmp_path)
    urls = [f"https://cdn.shop.example/{i}.jpg" for i in range(50)]
    with ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(resolver.resolve, urls))
    assert len(fetcher.calls) == RETRIES + 1
    assert all(o.sha256 is None and "did not resolve" in o.error for o in outcomes[1:])
    assert "after 3 tries" in outcomes[0].error


def test_refused_urls_are_not_retried_and_say_so(tmp_path):
    def refuse(url, sink):
        raise FetchRefused(f"{url}: resolves to 10.0.0.1 (private)")

    fetcher = CountingFetcher(refuse)
    out = ImageResolver(fetcher, None, "t", tmp_path).resolve("http://intranet.example/a.png")
    assert len(fetcher.calls) == 1 and out.error.startswith("image URL refused")


def test_same_url_is_fetched_once(tmp_path):
    class Result:
        content_type = "image/png"

    def serve(url, sink):
        sink.write(b"png-bytes")
        return Result()

    fetcher = CountingFetcher(serve)
    resolver = ImageResolver(fetcher, None, "t", tmp_path)
    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(resolver.resolve, ["https://img.example/a.png"] * 20))
    assert len(fetcher.calls) == 1
    assert {o.sha256 for o in outcomes} == {hashlib.sha256(b"png-bytes").hexdigest()}


def test_local_images_are_read_next_to_the_catalog_only(tmp_path: Path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(b"local")
    (tmp_path.parent / "secret.png").write_bytes(b"outside")
    resolver = ImageResolver(CountingFetcher(dns_down), None, "t", tmp_path)
    assert resolver.resolve("img/a.png").sha256 == hashlib.sha256(b"local").hexdigest()
    assert "leaves the catalog's folder" in resolver.resolve("../secret.png").error
    assert "not found" in resolver.resolve("img/missing.png").error
