"""Fetch benchmark (on demand: `make bench-fetch ARGS="--mb 500 --runs 3"`): the provider-output
fetcher against curl on loopback, and the fetcher's memory growth, on one large output.

A file of `--mb` MiB that starts like an MP4 (`ftyp` box) is served by `python -m http.server` in
its own process on 127.0.0.1 (so the server's memory is not ours). Each run downloads it whole,
discarding the bytes, first with `curl -o /dev/null`, then the same work as the fetcher with
`curl | sha256sum` (download and hash, in two processes), then with SafeFetcher as the worker
builds it (https-only rules with the host configured for plain http, pinned address, raw bytes
through the bounded decoder, content type and magic number checked, sha256 computed as the fetch
activity does, on its own thread). Figures: MB/s of each (median of the runs), the fetcher's
ratio to `curl | sha256sum` (the target: >= 0.8) and to bare curl, and the fetcher without the
sha256 (what hashing costs); wall and CPU seconds of each (curl's and sha256sum's from
RUSAGE_CHILDREN, ours from process_time) and bytes per CPU-second, a ratio that depends less on a
loaded machine; the machine's load average at the end; this process's memory growth
during a fetch, both as peak RSS (VmHWM after clear_refs) and as tracemalloc's peak (a separate
run: tracing slows the fetch). The fetch activity also streams to S3 and a local copy; those are
not measured here. Nothing here is a pass/fail test; a final JSON line carries the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import httpx

from adapters.fetcher import MP4_BODY, SafeFetcher

_BLOCK = 16 * 1024 * 1024


class _Discard:
    """A sink that keeps nothing: only the fetcher's own memory counts."""

    def write(self, data: bytes) -> int:
        return len(data)


def make_output(path: Path, mb: int) -> int:
    header = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom"
    block = os.urandom(_BLOCK)
    total = mb * 1024 * 1024
    with open(path, "wb") as out:
        out.write(header)
        written = len(header)
        while written < total:
            piece = block[: min(_BLOCK, total - written)]
            out.write(piece)
            written += len(piece)
    return written


def serve(folder: Path) -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "--directory", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            httpx.head(f"http://127.0.0.1:{port}/", timeout=1)
            return server, port
        except httpx.HTTPError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("http.server did not start")


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def curl_mb_s(url: str, size: int) -> tuple[float, float]:
    """(MB/s, MB per CPU-second) of one curl download."""
    cpu = _children_cpu_s()
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{size_download} %{time_total}", url],
                         capture_output=True, text=True, check=True).stdout.split()
    cpu = _children_cpu_s() - cpu
    assert int(float(out[0])) == size, out
    return size / float(out[1]) / 1e6, size / max(cpu, 1e-3) / 1e6


def curl_sha256_run(url: str, size: int) -> tuple[float, float, str]:
    """(MB/s, CPU-seconds, digest) of `curl | sha256sum`: the fetcher's work done by two processes."""
    cpu, started = _children_cpu_s(), time.perf_counter()
    out = subprocess.run(["sh", "-c", 'curl -s "$1" | sha256sum', "sh", url],
                         capture_output=True, text=True, check=True).stdout.split()
    took, cpu = time.perf_counter() - started, _children_cpu_s() - cpu
    return size / took / 1e6, cpu, out[0]


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def fetcher_for(port: int, size: int) -> SafeFetcher:
    host = f"127.0.0.1:{port}"
    return SafeFetcher({host}, allow_http=False, http_hosts={host}, max_bytes=size + 1024, timeout_s=600)


def fetch_run(url: str, port: int, size: int) -> tuple[float, float, float, str]:
    """(MB/s, CPU-seconds, peak RSS growth in MiB, digest) of one fetch."""
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _rss_kb("VmRSS")
    started, cpu = time.perf_counter(), time.process_time()
    result = fetcher_for(port, size).fetch_to(url, _Discard(), expect=MP4_BODY)  # type: ignore[arg-type]
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert result.size == size, result
    return size / took / 1e6, cpu, (_rss_kb("VmHWM") - before) / 1024, result.sha256


def stream_mb_s(url: str, port: int, size: int) -> float:
    """The fetcher without the sha256 (bytes counted only): what the hash costs."""
    started = time.perf_counter()
    with fetcher_for(port, size).stream(url, expect=MP4_BODY) as (_meta, chunks):
        got = sum(len(chunk) for chunk in chunks)
    assert got == size, got
    return size / (time.perf_counter() - started) / 1e6


def traced_peak_mib(url: str, port: int, size: int) -> float:
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fetcher_for(port, size).fetch_to(url, _Discard(), expect=MP4_BODY)  # type: ignore[arg-type]
        return (tracemalloc.get_traced_memory()[1] - base) / 2**20
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=500, help="size of the output in MiB")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("curl") is None:
        raise SystemExit("curl is not on PATH")
    folder = Path(tempfile.mkdtemp(prefix="rq-fetch-bench-"))
    server = None
    try:
        size = make_output(folder / "out.mp4", args.mb)
        server, port = serve(folder)
        url = f"http://127.0.0.1:{port}/out.mp4?X-Amz-Signature=bench"
        curl_mb_s(url, size)  # warm the page cache
        curl, piped, ours, bare, rss, curl_cpu, piped_cpu, ours_cpu = [], [], [], [], [], [], [], []
        for run in range(args.runs):
            speed, per_cpu = curl_mb_s(url, size)
            curl.append(speed)
            curl_cpu.append(per_cpu)
            speed, cpu_s, piped_sha = curl_sha256_run(url, size)
            piped.append(speed)
            piped_cpu.append(cpu_s)
            speed, cpu_s, grew, sha = fetch_run(url, port, size)
            assert sha == piped_sha, (sha, piped_sha)
            ours.append(speed)
            ours_cpu.append(cpu_s)
            rss.append(grew)
            bare.append(stream_mb_s(url, port, size))
            print(f"run {run + 1}: curl {curl[-1]:.0f} MB/s ({curl_cpu[-1]:.0f} MB per CPU-s); curl | sha256sum "
                  f"{piped[-1]:.0f} MB/s ({size / piped[-1] / 1e6:.2f} s wall, {piped_cpu[-1]:.2f} CPU-s); fetcher "
                  f"{speed:.0f} MB/s ({size / speed / 1e6:.2f} s wall, {cpu_s:.2f} CPU-s; without sha256 "
                  f"{bare[-1]:.0f} MB/s), RSS +{grew:.1f} MiB (load {os.getloadavg()[0]:.2f})", flush=True)
        traced = traced_peak_mib(url, port, size)
        mb = size / 1e6
        figures = {
            "size_mib": args.mb, "runs": args.runs, "cpus": os.cpu_count(),
            "load_1m": round(os.getloadavg()[0], 2),
            "curl_mb_s": round(statistics.median(curl), 1),
            "curl_sha256sum_mb_s": round(statistics.median(piped), 1),
            "fetcher_mb_s": round(statistics.median(ours), 1),
            "ratio_fetcher_to_curl_sha256sum": round(statistics.median(ours) / statistics.median(piped), 3),
            "ratio_fetcher_to_curl": round(statistics.median(ours) / statistics.median(curl), 3),
            "fetcher_no_sha256_mb_s": round(statistics.median(bare), 1),
            "curl_sha256sum_cpu_s": round(statistics.median(piped_cpu), 2),
            "fetcher_cpu_s": round(statistics.median(ours_cpu), 2),
            "curl_mb_per_cpu_s": round(statistics.median(curl_cpu), 1),
            "curl_sha256sum_mb_per_cpu_s": round(mb / statistics.median(piped_cpu), 1),
            "fetcher_mb_per_cpu_s": round(mb / statistics.median(ours_cpu), 1),
            "rss_growth_mib_max": round(max(rss), 1), "tracemalloc_peak_mib": round(traced, 2),
        }
        print(f"{args.mb} MiB on loopback: curl | sha256sum {figures['curl_sha256sum_mb_s']} MB/s "
              f"({figures['curl_sha256sum_cpu_s']} CPU-s), fetcher {figures['fetcher_mb_s']} MB/s "
              f"({figures['fetcher_cpu_s']} CPU-s): ratio {figures['ratio_fetcher_to_curl_sha256sum']} "
              f"(target >= 0.8); bare curl {figures['curl_mb_s']} MB/s (ratio {figures['ratio_fetcher_to_curl']}); "
              f"fetcher without sha256 {figures['fetcher_no_sha256_mb_s']} MB/s; fetch memory growth: RSS "
              f"+{figures['rss_growth_mib_max']} MiB, tracemalloc peak {figures['tracemalloc_peak_mib']} MiB "
              f"(load {figures['load_1m']})")
        print(json.dumps(figures))
    finally:
        if server is not None:
            server.kill()
            server.wait()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
