"""`/files/<job>/<token>.mp4`: a job's output behind the signed, expiring URL its status gives."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse

from emulator.config import EmulatorConfig
from emulator.errors import ApiError
from emulator.signing import check_file_token


def files_router(config: EmulatorConfig) -> APIRouter:
    router = APIRouter()

    @router.get("/files/{job_id}/{token}.mp4", response_class=FileResponse)
    def download(job_id: str, token: str) -> FileResponse:
        if not check_file_token(config.url_secret, job_id, token):
            raise ApiError(403, "URL.EXPIRED_OR_INVALID", "URL expired or invalid: fetch the job again")
        path = config.output_path(job_id)
        if not path.is_file():
            raise ApiError(404, "NOT_FOUND", "no output for this job")
        return FileResponse(path, media_type="video/mp4")

    return router
