"""`/v1/imports`: `reelqueue import / run / cancel / export` over HTTP, for an uploaded catalog
(control/imports.py holds what both call)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from temporalio.client import Client

from adapters.storage import ObjectStorage
from catalog.importer import ImportSummary
from catalog.plan import PlanError
from catalog.readers import CatalogFormatError
from config.settings import Settings
from control.imports import (
    CatalogNameTooLong,
    CatalogNotReady,
    ImportRequest,
    ImportTooLarge,
    ImportView,
    cancel_import_tasks,
    import_upload,
    import_view,
    owned_import_total,
    start_import_workflows,
)
from delivery.export import export_rows, json_chunks
from delivery.links import LinkSigner
from gateway.deps import GatewayDeps, gateway_deps
from gateway.problems import ProblemError
from gateway.tenancy import Principal, key_check, require_tenant, while_live

router = APIRouter(tags=["imports"])
ImportId = Annotated[str, Path(pattern=r"^imp_[0-9a-f]{20}$", description="an import id")]
Tenant = Annotated[Principal, Depends(require_tenant)]
Deps = Annotated[GatewayDeps, Depends(gateway_deps)]


def _settings(request: Request) -> Settings:
    settings = getattr(request.app.state, "import_settings", None)
    if settings is None:
        settings = request.app.state.import_settings = Settings()
    return settings


async def _temporal(deps: GatewayDeps) -> Client:
    if deps.temporal is None:
        raise ProblemError(503, "workflows cannot be started by this gateway", slug="temporal-unavailable")
    return await deps.temporal.get()


def _not_found() -> ProblemError:
    return ProblemError(404, "no such import", slug="not-found")


@router.post("/imports", status_code=201, response_model=ImportSummary,
             response_model_exclude={"report", "report_csv"})
def create_import(body: ImportRequest, principal: Tenant, deps: Deps, request: Request) -> ImportSummary:
    """Import an uploaded catalog (a READY CSV/TSV asset) with a plan: the importer of `reelqueue
    import`, its report and its tasks. Runs before the answer; the same file and plan again answer
    the same import. Status REJECTED: see `GET /v1/imports/{id}` for the issues."""
    settings = _settings(request)
    try:
        return import_upload(settings, deps.db, ObjectStorage.from_settings(settings), principal.tenant_id, body,
                             credits_per_second=deps.api.credits_per_second, max_tasks=deps.api.max_import_tasks,
                             providers=deps.providers)
    except ImportTooLarge as exc:
        raise ProblemError(422, str(exc), slug="import-too-large") from exc
    except CatalogNameTooLong as exc:
        raise ProblemError(422, str(exc), slug="catalog-name-too-long") from exc
    except CatalogNotReady as exc:
        raise ProblemError(422, "asset_id is not a READY catalog upload", slug="catalog-not-ready") from exc
    except PlanError as exc:
        raise ProblemError(422, str(exc), slug="plan-invalid") from exc
    except CatalogFormatError as exc:
        raise ProblemError(422, str(exc), slug="catalog-format") from exc


@router.get("/imports/{import_id}", response_model=ImportView)
def get_import(import_id: ImportId, principal: Tenant, deps: Deps) -> ImportView:
    """The import's summary, its validation issues and its tasks by status."""
    view = import_view(deps.db, principal.tenant_id, import_id)
    if view is None:
        raise _not_found()
    return view


@router.post("/imports/{import_id}/run")
async def run_import_tasks(import_id: ImportId, principal: Tenant, deps: Deps) -> dict[str, Any]:
    """Start every task's workflow, as `reelqueue run` does (started ones are left alone)."""
    total = await run_in_threadpool(owned_import_total, deps.db, principal.tenant_id, import_id)
    if total is None:
        raise _not_found()
    started = await start_import_workflows(await _temporal(deps), deps.db, import_id, deps.task_queue)
    return {"import_id": import_id, "tasks": total, **started}


@router.post("/imports/{import_id}/cancel")
async def cancel_import(import_id: ImportId, principal: Tenant, deps: Deps) -> dict[str, Any]:
    """Cancel every task of the import that has not ended, each as `reelqueue cancel` does."""
    total = await run_in_threadpool(owned_import_total, deps.db, principal.tenant_id, import_id)
    if total is None:
        raise _not_found()
    counts = await cancel_import_tasks(await _temporal(deps), deps.db, import_id, "canceled through the API",
                                       by="api")
    return {"import_id": import_id, "tasks": total, **counts}


@router.get("/imports/{import_id}/export", response_class=StreamingResponse,
            responses={200: {"content": {"application/json": {}}, "description": "the export rows"}})
def export_import(import_id: ImportId, principal: Tenant, deps: Deps, request: Request) -> StreamingResponse:
    """The rows of `reelqueue export --format json`: one per finished video, with signed links. A key
    revoked meanwhile ends the answer within a second of streaming."""
    if owned_import_total(deps.db, principal.tenant_id, import_id) is None:
        raise _not_found()
    settings = _settings(request)
    signer = deps.links or LinkSigner.from_settings(settings)
    rows = export_rows(deps.db, signer, import_id, settings.media_link_ttl_s)
    chunks = while_live(json_chunks(rows, import_id), key_check(deps.db, principal.key_id))
    return StreamingResponse(chunks, media_type="application/json")
