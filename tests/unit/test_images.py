"""Image resolution rules: one probe per dead host, a per-URL cache, local paths kept inside the catalog
folder, only real images (by magic number, under the pixel cap) stored, re-encoded without metadata."""

import hashlib
import io
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from PIL import Image

from adapters.fetcher import FetchFailed, FetchRefused
from catalog.images import MAX_IMAGE_PIXELS, RETRIES, ImageResolver, image_fetcher, image_size, normalised_image
from config.settings import Settings


def encoded(fmt: str = "PNG", size: tuple[int, int] = (8, 6), **save) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 10)).save(out, format=fmt, **save)
    return out.getvalue()


PNG = encoded()


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
        sink.write(PNG)
        return Result()

    fetcher = CountingFetcher(serve)
    resolver = ImageResolver(fetcher, None, "t", tmp_path)
    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(resolver.resolve, ["https://img.example/a.png"] * 20))
    assert len(fetcher.calls) == 1
    assert len({o.sha256 for o in outcomes}) == 1 and outcomes[0].content_type == "image/png"


def test_local_images_are_read_next_to_the_catalog_only(tmp_path: Path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(PNG)
    (tmp_path.parent / "secret.png").write_bytes(PNG)
    resolver = ImageResolver(CountingFetcher(dns_down), None, "t", tmp_path)
    image = resolver.resolve("img/a.png")
    assert image.sha256 == hashlib.sha256(normalised_image(PNG)[0]).hexdigest()
    assert (image.width, image.height) == image_size(normalised_image(PNG)[0]) and image.width > 0  # the asset's size
    outside = resolver.resolve("../secret.png")
    assert outside.invalid and "inside the catalog's folder" in outside.error
    missing = resolver.resolve("img/missing.png")
    assert "not found" in missing.error and not missing.invalid  # a missing file is for a person to fix


@pytest.mark.parametrize("source", ["../.secret", ".secret", "img/.hidden.png", "img/../a.png", "/etc/passwd"])
def test_hidden_parent_and_absolute_paths_are_refused(tmp_path: Path, source: str):
    (tmp_path / "img").mkdir()
    for name in (".secret", "img/.hidden.png", "a.png"):
        (tmp_path / name).write_bytes(PNG)
    (tmp_path.parent / ".secret").write_bytes(PNG)
    out = ImageResolver(CountingFetcher(dns_down), None, "t", tmp_path).resolve(source)
    assert out.sha256 is None and out.invalid and "inside the catalog's folder" in out.error


def test_a_symlink_out_of_the_folder_is_refused(tmp_path: Path):
    catalog_dir = tmp_path / "catalog"
    catalog_dir.mkdir()
    (tmp_path / "outside.png").write_bytes(PNG)
    os.symlink(tmp_path / "outside.png", catalog_dir / "link.png")
    out = ImageResolver(CountingFetcher(dns_down), None, "t", catalog_dir).resolve("link.png")
    assert out.invalid and "leaves the catalog's folder" in out.error


def test_a_symlink_to_a_hidden_file_inside_the_folder_is_refused(tmp_path: Path):
    (tmp_path / ".private").mkdir()
    (tmp_path / ".private" / "a.png").write_bytes(PNG)
    os.symlink(tmp_path / ".private" / "a.png", tmp_path / "link.png")
    os.symlink(tmp_path / "link.png", tmp_path / "fine.png")  # a chain ending at a hidden file
    resolver = ImageResolver(CountingFetcher(dns_down), None, "t", tmp_path)
    for source in ("link.png", "fine.png"):
        out = resolver.resolve(source)
        assert out.invalid and "hidden file through a symlink" in out.error


@pytest.mark.parametrize(("data", "reason"), [
    (b"<html><script>alert(1)</script></html>", "not an image"),
    (b"GIF89a" + b"\0" * 40, "not an image"),
    (b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "not a readable PNG"),
    ((20_000, 20_000), "image too large"),  # a bomb: Pillow's own check answers first at this size
    ((6_000, 5_000), "image too large: 6000 x 5000 pixels"),  # over our cap, under Pillow's
])
def test_non_images_and_bombs_are_invalid(tmp_path: Path, png_bomb, data, reason: str):
    (tmp_path / "x.png").write_bytes(png_bomb(*data) if isinstance(data, tuple) else data)
    out = ImageResolver(CountingFetcher(dns_down), None, "t", tmp_path).resolve("x.png")
    assert out.sha256 is None and out.invalid and reason in out.error


def test_the_bomb_is_refused_from_its_header(png_bomb):
    bomb = png_bomb()
    assert len(bomb) < 100_000 and MAX_IMAGE_PIXELS < 20_000 * 20_000
    with pytest.raises(ValueError, match="too large"):
        normalised_image(bomb)


def test_images_are_reencoded_without_metadata():
    exif = Image.Exif()
    exif[0x010F] = "SecretCam"  # Make
    jpeg = encoded("JPEG", exif=exif.tobytes(), icc_profile=b"x" * 64)
    data, content_type = normalised_image(jpeg + b"<script>trailing</script>")  # a polyglot tail is dropped
    assert content_type == "image/jpeg" and b"SecretCam" not in data and b"<script>" not in data
    with Image.open(io.BytesIO(data)) as image:
        assert image.size == (8, 6) and not image.getexif() and "icc_profile" not in image.info
    webp, webp_type = normalised_image(encoded("WEBP"))
    assert webp_type == "image/png" and webp.startswith(b"\x89PNG")


def test_a_fetched_html_body_is_invalid_whatever_its_content_type(tmp_path: Path):
    class Result:
        content_type = "image/png"

    def serve(url, sink):
        sink.write(b"<!doctype html><script>document.cookie</script>")
        return Result()

    out = ImageResolver(CountingFetcher(serve), None, "t", tmp_path).resolve("https://img.example/a.png")
    assert out.invalid and "not an image" in out.error


class RecordingStorage:
    def __init__(self):
        self.puts: list[tuple[str, bytes, str]] = []

    def put_bytes(self, key, data, content_type):
        self.puts.append((key, data, content_type))

        class Stored:
            pass

        stored = Stored()
        stored.key = key
        return stored


def test_only_normalised_images_are_stored(tmp_path: Path):
    (tmp_path / "good.png").write_bytes(PNG)
    (tmp_path / "bad.png").write_bytes(b"<html></html>")
    storage = RecordingStorage()
    resolver = ImageResolver(CountingFetcher(dns_down), storage, "t", tmp_path)
    good, bad = resolver.resolve("good.png"), resolver.resolve("bad.png")
    assert bad.key is None and len(storage.puts) == 1
    key, data, content_type = storage.puts[0]
    assert key == good.key == f"tenants/t/images/{good.sha256}.png" and content_type == "image/png"
    assert hashlib.sha256(data).hexdigest() == good.sha256


def test_image_fetcher_adds_no_host_of_its_own(monkeypatch):
    monkeypatch.delenv("REELQUEUE_FETCH_ALLOWED_HOSTS", raising=False)
    settings = Settings(emulator_url="http://127.0.0.1:8900", fetch_allowed_hosts=[])
    with pytest.raises(FetchRefused, match="loopback"):
        image_fetcher(settings).fetch_to("http://127.0.0.1:8900/_sim/image.png", io.BytesIO())
    allowed = Settings(emulator_url="http://127.0.0.1:8900", fetch_allowed_hosts=["127.0.0.1:1"])
    with pytest.raises(FetchFailed):  # admitted, and nothing listens there
        image_fetcher(allowed, timeout_s=2).fetch_to("http://127.0.0.1:1/a.png", io.BytesIO())
