"""`reelqueue temporal setup` (and `dev up`): the namespace exists and carries the custom search
attributes the workflows upsert. Idempotent: what is there already is left alone."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from google.protobuf.duration_pb2 import Duration
from pydantic import BaseModel, computed_field
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, RegisterNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from adapters.temporal_client import connect, is_temporal_cloud
from config.settings import Settings
from workflows.search_attributes import ALL, type_name

# A server that will not let this identity change its attributes (Temporal Cloud without an admin
# key, a self-hosted cluster with an authorizer) answers with one of these.
REFUSED = {RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED, RPCStatusCode.UNAUTHENTICATED}
NAMESPACE_WAIT = timedelta(seconds=30)  # a new namespace reaches every frontend's cache within this
REQUIRED: dict[str, int] = {key.name: key.indexed_value_type for key in ALL}  # name -> IndexedValueType


class TemporalSetupError(RuntimeError):
    """Set-up cannot go on (no namespace and no leave to create one); the message says what to do."""


class TemporalSetupReport(BaseModel):
    address: str
    namespace: str
    cloud: bool
    namespace_created: bool
    present: list[str]  # registered before this run, with the right type
    added: list[str]  # registered by this run
    missing: list[str]  # still absent: the server refused to add them (see `instructions`)
    wrong_type: dict[str, str]  # name -> the type it is registered with, which is not the one needed
    instructions: list[str]  # commands that finish the job where this identity could not

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        return not self.missing and not self.wrong_type


async def setup_temporal(settings: Settings, *, create_namespace: bool = False,
                         retention_days: int = 30, wait_s: float = 0.0) -> TemporalSetupReport:
    """`wait_s`: how long to keep trying while the server does not answer yet."""
    return await setup_namespace(await connect(settings, wait_s=wait_s), create_namespace=create_namespace,
                                 retention_days=retention_days)


async def setup_namespace(client: Client, *, create_namespace: bool = False,
                          retention_days: int = 30) -> TemporalSetupReport:
    """The work of `setup_temporal` on a connected client."""
    config = client.service_client.config
    address, namespace = config.target_host, client.namespace
    server_name = config.tls.domain if isinstance(config.tls, TLSConfig) else None  # PrivateLink: a VPC address
    cloud = is_temporal_cloud(address) or is_temporal_cloud(server_name or "")
    created = await _ensure_namespace(client, cloud, create_namespace, retention_days)
    try:
        registered = await _registered(client)
    except RPCError as exc:
        if exc.status not in REFUSED:
            raise
        registered = {}  # not allowed to look: try to add them all, and say what to run if refused too
    absent = [name for name in REQUIRED if name not in registered]
    added, refused = await _add(client, absent)
    wrong = {name: type_name(registered[name]) for name in REQUIRED
             if registered.get(name, REQUIRED[name]) != REQUIRED[name]}
    return TemporalSetupReport(
        address=address, namespace=namespace, cloud=cloud, namespace_created=created,
        present=[name for name in REQUIRED if registered.get(name) == REQUIRED[name]],
        added=added, missing=refused, wrong_type=wrong,
        instructions=_instructions(namespace, cloud, refused, wrong))


def setup_temporal_sync(settings: Settings) -> TemporalSetupReport:
    """For callers without an event loop of their own (`dev up`), in a thread so one may be running."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, setup_temporal(settings)).result()


async def _ensure_namespace(client: Client, cloud: bool, create: bool, retention_days: int) -> bool:
    """True if this run registered the namespace; TemporalSetupError if it is absent and may not be."""
    if await _namespace_exists(client):
        return False
    namespace = client.namespace
    if cloud:
        raise TemporalSetupError(f"namespace {namespace} does not exist on Temporal Cloud: create it in the Cloud "
                                 "UI or with `tcld namespace create` (its id there is name.account)")
    if not create:
        raise TemporalSetupError(f"namespace {namespace} does not exist: run again with --create-namespace, or "
                                 f"`temporal operator namespace create --namespace {namespace}`")
    retention = Duration(seconds=int(timedelta(days=retention_days).total_seconds()))
    try:
        await client.workflow_service.register_namespace(
            RegisterNamespaceRequest(namespace=namespace, workflow_execution_retention_period=retention))
    except RPCError as exc:
        if exc.status != RPCStatusCode.ALREADY_EXISTS:  # another set-up job won the race
            raise
    await _until_served(client)
    return True


async def _until_served(client: Client) -> None:
    """A new namespace is in the database at once but reaches the servers' namespace caches (which
    the search-attribute calls read) a moment later."""
    deadline = time.monotonic() + NAMESPACE_WAIT.total_seconds()
    while True:
        try:
            await _registered(client)
            return
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.25)


async def _namespace_exists(client: Client) -> bool:
    try:
        await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=client.namespace))
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def _registered(client: Client) -> dict[str, int]:
    """Custom search attributes of the namespace: name -> IndexedValueType."""
    found = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace))
    return dict(found.custom_attributes)


async def _add(client: Client, names: list[str]) -> tuple[list[str], list[str]]:
    """(added, refused): one request for every absent attribute; a refusal is reported, not raised."""
    if not names:
        return [], []
    request = AddSearchAttributesRequest(
        namespace=client.namespace,
        search_attributes={name: REQUIRED[name] for name in names})
    try:
        await client.operator_service.add_search_attributes(request)
    except RPCError as exc:
        if exc.status not in REFUSED:
            raise
        return [], names
    return names, []


def _instructions(namespace: str, cloud: bool, missing: list[str], wrong: dict[str, str]) -> list[str]:
    lines = []
    if missing and cloud:
        flags = " ".join(f"--search-attribute {name}={type_name(REQUIRED[name])}" for name in missing)
        lines.append(f"tcld namespace search-attributes add --namespace {namespace} {flags}")
        lines.append("(or in the Cloud UI: Namespaces > the namespace > Search Attributes)")
    elif missing:
        lines += [f"temporal operator search-attribute create --namespace {namespace} --name {name} "
                  f"--type {type_name(REQUIRED[name])}" for name in missing]
        lines.append("(as an identity the cluster's authorizer lets manage search attributes)")
    lines += [f"{name} is registered as {found}, the workflows need {type_name(REQUIRED[name])}: remove it "
              f"(self-hosted: temporal operator search-attribute remove) and run set-up again"
              for name, found in wrong.items()]
    return lines
