"""Connecting to Temporal: every client (worker, CLI, gateway, tests) uses the pydantic converter."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter


async def connect(address: str, namespace: str = "default") -> Client:
    return await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter)
