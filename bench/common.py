"""What the pipeline and capacity benchmarks share: CPU per process tree, /metrics reading, a stack.

CPU: psutil `cpu_times` of each service's process. A process's own time is its own; the time of
children it already reaped (ffmpeg, ffprobe under the worker and the emulator; backends under
Postgres) is in its `children_*` times, and children still alive are read one by one. So ffmpeg
is told apart from the Python processes that start it: `worker` and `emulator` are their own CPU,
`ffmpeg` is what their children used.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SERVICES = ["postgres", "s3", "temporal", "emulator", "gateway", "worker"]  # the stack a benchmark starts

# Service name -> how its tree's CPU is reported: "tree" = everything under it as that service,
# "split" = its own CPU as the service and its children's as ffmpeg.
CPU_SERVICES = {"worker": "split", "emulator": "split", "temporal": "tree", "postgres": "tree", "s3": "tree",
                "gateway": "tree"}


def _own(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def _reaped(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.children_user + t.children_system


def _descendants(proc: psutil.Process) -> float:
    total = 0.0
    for child in proc.children(recursive=True):
        try:
            total += _own(child)
        except psutil.NoSuchProcess:
            continue
    return total


def cpu_by_process(pids: dict[str, int | list[int] | None]) -> dict[str, float]:
    """CPU seconds so far per service (and `ffmpeg`, `bench` for this process and its threads); a
    service may be several processes (worker processes of a layout), summed."""
    out = {name: 0.0 for name in CPU_SERVICES} | {"ffmpeg": 0.0}
    for name, some in pids.items():
        if some is None or name not in CPU_SERVICES:
            continue
        for pid in some if isinstance(some, list) else [some]:
            try:
                proc = psutil.Process(pid)
                children = _reaped(proc) + _descendants(proc)
                if CPU_SERVICES[name] == "split":
                    out[name] += _own(proc)
                    out["ffmpeg"] += children
                else:
                    out[name] += _own(proc) + children
            except psutil.NoSuchProcess:
                continue
    out["bench"] = _own(psutil.Process(os.getpid()))
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after}


def service_pids(settings) -> dict[str, int | None]:  # noqa: ANN001 - config.Settings
    import devstack

    return {name: devstack.running_pid(settings, name) for name in CPU_SERVICES}


def scrape(url: str, token: str = "") -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a /metrics page: (name, sorted labels) -> value (`token`: the gateway's)."""
    text = httpx.get(url, headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape_all(urls: list[str]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of several workers' /metrics added up (counters, histogram sums and counts)."""
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for url in urls:
        for key, value in scrape(url).items():
            merged[key] = merged.get(key, 0.0) + value
    return merged


def total(samples: dict, name: str, **labels: str) -> float:
    """Sum of `name` over the samples whose labels include `labels`."""
    return sum(v for (n, lab), v in samples.items() if n == name and set(labels.items()) <= set(lab))


def temporal_metrics_url(settings) -> str:  # noqa: ANN001 - config.Settings
    """The stack's Temporal dev server's Prometheus page (`--metrics-port`, chosen by `dev up`)."""
    from devstack.paths import stack_paths
    from devstack.stackfile import read_stack

    return f"http://127.0.0.1:{read_stack(stack_paths(settings))['ports']['temporal_metrics']}/metrics"


def by_label(samples: dict, name: str, label: str, **labels: str) -> dict[str, float]:
    """`name` summed per value of `label`, over the samples whose labels include `labels` (a counter's
    samples are read back as `name_total`)."""
    out: dict[str, float] = {}
    for (n, lab), value in samples.items():
        found = dict(lab)
        if n in (name, f"{name}_total") and label in found and set(labels.items()) <= set(lab):
            out[found[label]] = out.get(found[label], 0.0) + value
    return out


def worker_metrics_url(settings) -> str:  # noqa: ANN001
    return f"http://{settings.worker_metrics_host}:{settings.worker_metrics_port}/metrics"


def fresh_home(prefix: str) -> Path:
    """A temporary REELQUEUE_HOME, set in the environment (children read the same stack.json)."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["REELQUEUE_HOME"] = str(home)
    return home


@contextmanager
def bench_stack(prefix: str, services: list[str], *, keep: bool) -> Iterator[Any]:
    """Settings of a fresh REELQUEUE_HOME (`fresh_home`) with `services` of the embedded stack up;
    taken down and removed afterwards, or left running with `keep` (said)."""
    home = fresh_home(prefix)
    import devstack
    from config.settings import Settings

    t0 = time.perf_counter()
    try:
        devstack.up(Settings(), services=services)
    except BaseException:
        devstack.down(Settings())  # a half-started stack is not left running
        raise
    settings = Settings()
    print(f"stack:   up in {time.perf_counter() - t0:.1f} s under {home}; gateway {settings.gateway_url}", flush=True)
    try:
        yield settings
    finally:
        if keep:
            print(f"kept: REELQUEUE_HOME={home} (reelqueue dev down)")
        else:
            devstack.down(settings)
            shutil.rmtree(home, ignore_errors=True)


def input_image(settings: Any, tenant: str) -> str:
    """An example image stored and recorded as the tenant's INPUT_IMAGE: its asset id (a generation's
    `image_asset_id`)."""
    from adapters.storage import ObjectStorage
    from catalog.images import ImageOutcome, record_image_asset
    from schema.db import Database

    storage = ObjectStorage.from_settings(settings)
    storage.ensure_bucket()
    stored = storage.put_bytes(f"tenants/{tenant}/images/bench.png",
                               (EXAMPLES / "images" / "aurora-lamp.png").read_bytes(), "image/png")
    outcome = ImageOutcome(source="bench", sha256=stored.sha256, size=stored.size, content_type="image/png",
                           key=stored.key)
    with Database(settings.database_url).transaction() as session:
        return record_image_asset(session, storage.bucket, tenant, outcome).id


def machine() -> dict:
    """What the figures were measured on, and how busy it was."""
    return {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1)}


def one_second_plan(name: str) -> str:
    """A plan of one template with 1-second clips in one locale and ratio: one task per product."""
    return f"""
name = "{name}"
locales = ["en-US"]
aspect_ratios = ["9:16"]

[[templates]]
id = "clip"
version = "clip-v1"
duration_s = 1
cost_estimate = 2
[templates.prompts]
"en-US" = "Product shot of {{title}}, {{price}}."
"""


def database_and_storage():  # noqa: ANN201 - config.Settings, imported late (REELQUEUE_HOME first)
    """Postgres and S3 of the embedded stack, migrated and with the bucket: what the import and spend
    benches measure against (no Temporal, no workers)."""
    import devstack
    from adapters.storage import ObjectStorage
    from config.settings import Settings
    from schema.migrate import upgrade

    devstack.up(Settings(), services=["postgres", "s3"])
    settings = Settings()
    try:
        upgrade(settings.database_url)
        ObjectStorage.from_settings(settings).ensure_bucket()
    except BaseException:
        devstack.down(settings)  # a half-set-up stack is not left running
        raise
    return settings
