"""RFC 9457 problem details: every refusal of the gateway is `application/problem+json`.

Titles and details are written for the caller and never carry secrets, bodies or internals
(exception texts, SQL, hosts).
"""

from __future__ import annotations

from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException

from schema.db import database_unavailable

PROBLEM_JSON = "application/problem+json"
PROBLEM_TYPE = "urn:reelqueue:problem:"  # + a stable slug per case


class Problem(BaseModel):
    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None


class ProblemError(Exception):
    """Raised anywhere in a route: answered as the problem it carries."""

    def __init__(self, status: int, detail: str, *, slug: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(detail)
        title = HTTPStatus(status).phrase
        self.problem = Problem(type=f"{PROBLEM_TYPE}{slug}" if slug else "about:blank", title=title,
                               status=status, detail=detail)
        self.headers = headers


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(problem.model_dump(exclude_none=True), status_code=problem.status, headers=headers,
                        media_type=PROBLEM_JSON)


def install_problem_handlers(app: FastAPI) -> None:
    """Route refusals and framework errors (unknown route, wrong method, invalid request) answer
    problem+json. Routes turn their own unexpected errors into a ProblemError (see webhooks.py):
    an exception left to Starlette is re-raised, and its text (SQL parameters) logged."""

    @app.exception_handler(ProblemError)
    async def _problem(_: Request, exc: ProblemError) -> JSONResponse:
        return problem_response(exc.problem, exc.headers)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        title = HTTPStatus(exc.status_code).phrase
        return problem_response(Problem(title=title, status=exc.status_code), getattr(exc, "headers", None))

    @app.exception_handler(DBAPIError)
    async def _database(request: Request, exc: DBAPIError) -> JSONResponse:
        """Postgres unreachable, gone mid-request or refusing the write (a lock held past the
        timeout, read-only): 503, and the transaction was rolled back, so nothing was written (a
        client may retry; an Idempotency-Key makes that safe)."""
        why = database_unavailable(exc)
        if why is None:
            raise exc
        return problem_response(Problem(type=f"{PROBLEM_TYPE}database-unavailable", title="Service Unavailable",
                                        status=503, detail=f"{why}; nothing was written"),
                                {"Retry-After": "5"})

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return problem_response(Problem(type=f"{PROBLEM_TYPE}invalid-request", title="Bad Request", status=400,
                                        detail="the request is not valid: " + _where(exc)))


def _where(exc: RequestValidationError, most: int = 5) -> str:
    """Which fields and why (pydantic's messages), never the values sent."""
    found = [f"{'.'.join(str(part) for part in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
             for e in exc.errors()[:most]]
    return "; ".join(found)[:500]
