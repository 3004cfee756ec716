"""`reelqueue storage setup`: the S3 bucket this deployment writes to (a one-shot job before a deploy)."""

from __future__ import annotations

import typer

from cli.output import console, emit_json, fail
from config.settings import get_settings

storage_app = typer.Typer(help="The S3 object storage this deployment writes to.", no_args_is_help=True)


@storage_app.command("setup")
def setup(
    wait: float = typer.Option(0.0, "--wait", min=0, help="seconds to keep trying while S3 does not answer"),
    check: bool = typer.Option(False, "--check", help="only check that the bucket exists and these keys reach "
                               "it: create nothing, leave its CORS rule alone"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Make REELQUEUE_S3_BUCKET unless it exists, with the services' own keys, and set its CORS rule
    (uploads from the gateway's pages only: REELQUEUE_PUBLIC_URL); safe to repeat. With --check (the
    Kubernetes set-up step, where the operator makes the bucket and its rule once) nothing is written,
    so a rule set by hand stays and the app's keys need no CreateBucket or PutBucketCORS right."""
    from adapters.storage import ObjectStorage
    from devstack.seaweed import allow_browser_uploads

    settings = get_settings()
    where = f"s3 at {settings.s3_endpoint}: bucket {settings.s3_bucket!r}"
    storage = ObjectStorage.from_settings(settings)
    try:
        if check:
            created, exists = False, storage.bucket_exists(wait_s=wait)
        else:
            created, exists = storage.ensure_bucket(wait_s=wait), True
            allow_browser_uploads(settings)
    except Exception as exc:  # refused keys (S3Error), or no answer within --wait
        fail(f"{where}: {exc}", as_json=as_json)
    if not exists:
        fail(f"{where} does not exist: make it and its CORS rule once (docs/deploy.md, \"Uploads from a "
             "browser\"); --check creates nothing", as_json=as_json)
    if as_json:
        emit_json({"endpoint": settings.s3_endpoint, "bucket": settings.s3_bucket, "created": created,
                   "cors": "left alone" if check else "set"})
        return
    state = "exists (checked; CORS left alone)" if check else "created" if created else "exists"
    console.print(f"bucket {settings.s3_bucket} at {settings.s3_endpoint}: {state}")
