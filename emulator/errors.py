"""The emulator's error answers in the provider style, `{"error": {"code", "message"}}`, and the
handlers that turn refusals and invalid bodies into them (a dialect's routes answer in its own)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from emulator.dialects import DialectError, dialect_for
from emulator.engine import EngineRefusal

# The emulator's own code for each kind of engine refusal.
_REFUSAL_CODES = {"injected": "SIM.INJECTED_STATUS", "queue_full": "RATE_LIMIT.QUEUE_FULL", "outage": "SIM.OUTAGE",
                 "not_found": "NOT_FOUND"}


class ApiError(Exception):
    """An error answer in the provider style."""

    def __init__(self, status: int, code: str, message: str, *, retry_after: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = {"Retry-After": retry_after} if retry_after else None


def _error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None,
                   **extra: Any) -> JSONResponse:
    body = {"error": {"code": code, "message": message, **extra}}
    return JSONResponse(jsonable_encoder(body), status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Refusals the routes let through (the /v1 ones: a dialect catches its own), ApiError, a
    dialect's errors, and request validation in the caller's dialect or the emulator's shape."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(EngineRefusal)
    async def _refused(_: Request, exc: EngineRefusal) -> JSONResponse:  # in the emulator's own codes
        headers = None if exc.retry_after_s is None else {"Retry-After": f"{exc.retry_after_s:g}"}
        return _error_response(exc.status, _REFUSAL_CODES[exc.kind], exc.message, headers)

    @app.exception_handler(DialectError)
    async def _dialect_error(_: Request, exc: DialectError) -> JSONResponse:
        return exc.response

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        dialect = dialect_for(request.url.path)
        if dialect is not None:
            return dialect.invalid_request(exc)
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return _error_response(422, "VALIDATION.INVALID_REQUEST", f"{where}: {first.get('msg', 'invalid')}",
                              details=exc.errors())
