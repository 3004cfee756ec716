"""What `reelqueue dev status --json` prints: one entry per service, stable keys."""

from __future__ import annotations

from pydantic import BaseModel


class ServiceStatus(BaseModel):
    url: str
    pid: int | None = None
    up: bool = False


class StackStatus(BaseModel):
    services: dict[str, ServiceStatus]

    @property
    def all_up(self) -> bool:
        return all(s.up for s in self.services.values())
