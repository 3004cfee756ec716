"""`/v1/uploads` and `/v1/assets`: presigned uploads, validated in quarantine (control/uploads.py)."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request

from adapters.media.ffmpeg_tools import MediaLimits
from adapters.storage import ObjectStorage
from config.settings import Settings
from control.uploads import AssetView, CompleteRequest, UploadRefused, UploadRequest, Uploads, UploadTicket
from gateway.deps import GatewayDeps, gateway_deps
from gateway.problems import ProblemError
from gateway.tenancy import Principal, require_tenant

router = APIRouter(tags=["uploads"])
log = logging.getLogger(__name__)
SWEEP_EVERY_S = 60.0
AssetId = Annotated[str, Path(pattern=r"^ast_[0-9a-f]{32}$", description="an asset id from POST /v1/uploads")]
Tenant = Annotated[Principal, Depends(require_tenant)]
_sweep_lock = threading.Lock()


def upload_service(request: Request, deps: Annotated[GatewayDeps, Depends(gateway_deps)]) -> Uploads:
    """Built from Settings on first use (a test may set `app.state.uploads` first). Every upload route
    gets it, and so starts the background sweep now and then."""
    service = getattr(request.app.state, "uploads", None)
    if service is None:
        settings = Settings()
        service = Uploads(
            deps.db, ObjectStorage.from_settings(settings), url_ttl=timedelta(seconds=settings.upload_url_ttl_s),
            complete_ttl=timedelta(seconds=settings.upload_complete_ttl_s),
            media_limits=MediaLimits(threads=settings.media_threads, nice=settings.media_nice,
                                     max_memory_mb=settings.media_max_memory_mb),
            max_pixels=settings.media_max_input_pixels, max_duration_s=settings.media_max_input_duration_s,
        )
        request.app.state.uploads = service
        request.app.state.next_upload_sweep = 0.0
    _sweep_now_and_then(request, service)
    return service


Service = Annotated[Uploads, Depends(upload_service)]


@router.post("/uploads", status_code=201, response_model=UploadTicket)
def create_upload(body: UploadRequest, principal: Tenant, service: Service) -> UploadTicket:
    """Declare a file; send its bytes to `upload_url` (or each of `parts`), then complete it."""
    try:
        ticket = service.create(principal.tenant_id, body)
    except UploadRefused as exc:
        raise _problem(exc) from exc
    return ticket


@router.post("/uploads/{asset_id}/complete", response_model=AssetView)
def complete_upload(asset_id: AssetId, principal: Tenant, service: Service,
                    body: CompleteRequest | None = None) -> AssetView:
    """Check size and sha256, then validate: READY, or REJECTED with the reason. Repeatable."""
    try:
        return service.complete(principal.tenant_id, asset_id, body)
    except LookupError as exc:
        raise ProblemError(404, "no such asset", slug="not-found") from exc
    except UploadRefused as exc:
        raise _problem(exc) from exc


def _problem(refused: UploadRefused) -> ProblemError:
    retry = {"Retry-After": str(refused.retry_after_s)} if refused.retry_after_s is not None else None
    return ProblemError(refused.status, refused.detail, slug=refused.slug, headers=retry)


@router.get("/assets/{asset_id}", response_model=AssetView)
def get_asset(asset_id: AssetId, principal: Tenant, service: Service) -> AssetView:
    view = service.view(principal.tenant_id, asset_id)
    if view is None:
        raise ProblemError(404, "no such asset", slug="not-found")
    return view


def _sweep_now_and_then(request: Request, service: Uploads) -> None:
    """At most once a minute per process, in the background: expire uncompleted uploads, abort
    stale multipart uploads (any gateway may do it; every step is repeatable; any tenant's call
    of an upload route is the clock)."""
    with _sweep_lock:
        if time.monotonic() < request.app.state.next_upload_sweep:
            return
        request.app.state.next_upload_sweep = time.monotonic() + SWEEP_EVERY_S

    def sweep() -> None:
        try:
            report = service.sweep()
            if report.expired or report.aborted_multiparts:
                log.info("upload sweep: %s", report.model_dump())
        except Exception:  # noqa: BLE001 - the next sweep tries again; nothing waits on this one
            log.exception("upload sweep failed")

    threading.Thread(target=sweep, name="upload-sweep", daemon=True).start()
