"""Worker Versioning: which build of the workers new workflows start on (docs/deploy.md, "Rolling
deploys"). A run of a pinned workflow type stays on the build it started on; promoting a build makes it
the current version of the Worker Deployment, where new runs (and auto-upgrade ones) go."""

from __future__ import annotations

import asyncio
import time

from temporalio.api.deployment.v1 import WorkerDeploymentVersion
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode


class PromotionError(RuntimeError):
    """The server would not make the build current (unknown deployment, no such version yet)."""


async def promote(client: Client, deployment_name: str, build_id: str, *, wait_s: float = 0.0,
                  allow_no_pollers: bool = False) -> str | None:
    """Make `build_id` the current version of `deployment_name`; the build it replaces (None: none was).

    `wait_s`: keep trying while the server has not registered the version yet (its workers have just
    started polling). `allow_no_pollers`: promote a version no worker has polled yet (a first deploy
    whose workers start after the promotion)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            answer = await client.workflow_service.set_worker_deployment_current_version(
                SetWorkerDeploymentCurrentVersionRequest(
                    namespace=client.namespace, deployment_name=deployment_name, build_id=build_id,
                    identity=client.identity, allow_no_pollers=allow_no_pollers))
            previous = answer.previous_deployment_version
            return previous.build_id or None
        except RPCError as exc:
            retry = exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION)
            if not retry or time.monotonic() > deadline:
                raise PromotionError(f"{deployment_name} build {build_id}: {exc.message}") from exc
        await asyncio.sleep(0.5)


async def current_build(client: Client, deployment_name: str) -> str | None:
    """The build new runs start on now (None: no current version, or no such deployment)."""
    try:
        answer = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployment_name))
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    current: WorkerDeploymentVersion = answer.worker_deployment_info.routing_config.current_deployment_version
    return current.build_id or None
