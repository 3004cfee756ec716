"""Where the Temporal connection comes from: the envconfig profile, the REELQUEUE_* settings, the
stack `dev up` writes; and what `reelqueue temporal setup` tells a Temporal Cloud user to run."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import trustme
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from adapters.temporal_client import TemporalConfigError, connect_options, is_temporal_cloud
from config.settings import STACK_FILE, Settings
from control.temporal_setup import REQUIRED, _instructions, setup_namespace


def test_without_any_configuration_it_is_the_local_default(temporal_env: pytest.MonkeyPatch) -> None:
    assert connect_options(Settings()) == {"target_host": "127.0.0.1:7233", "namespace": "default"}


def test_temporal_variables_give_address_namespace_and_api_key_over_tls(temporal_env: pytest.MonkeyPatch) -> None:
    temporal_env.setenv("TEMPORAL_ADDRESS", "us-east-1.aws.api.temporal.io:7233")
    temporal_env.setenv("TEMPORAL_NAMESPACE", "prod.a1b2c")
    temporal_env.setenv("TEMPORAL_API_KEY", "key-1")
    options = connect_options(Settings())
    assert (options["target_host"], options["namespace"], options["api_key"], options["tls"]) == (
        "us-east-1.aws.api.temporal.io:7233", "prod.a1b2c", "key-1", True)


def test_reelqueue_settings_that_are_set_win_over_the_profile_and_keep_its_tls(
    temporal_env: pytest.MonkeyPatch,
) -> None:
    temporal_env.setenv("TEMPORAL_ADDRESS", "profile-host:7233")
    temporal_env.setenv("TEMPORAL_NAMESPACE", "profile-ns")
    temporal_env.setenv("TEMPORAL_API_KEY", "key-1")
    temporal_env.setenv("REELQUEUE_TEMPORAL_ADDRESS", "temporal.internal:7233")
    options = connect_options(Settings())
    assert (options["target_host"], options["namespace"], options["api_key"]) == (
        "temporal.internal:7233", "profile-ns", "key-1")


def test_the_stack_dev_up_started_ignores_the_users_profile(temporal_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """stack.json names the embedded dev server (plain gRPC): a Cloud profile must not add TLS to it."""
    home = tmp_path / "home"
    home.mkdir()
    (home / STACK_FILE).write_text(json.dumps({"settings": {"temporal_address": "127.0.0.1:41000",
                                                            "temporal_envconfig": False}}))
    temporal_env.setenv("TEMPORAL_ADDRESS", "prod.a1b2c.tmprl.cloud:7233")
    temporal_env.setenv("TEMPORAL_API_KEY", "key-1")
    assert connect_options(Settings()) == {"target_host": "127.0.0.1:41000", "namespace": "default"}


def test_a_profile_file_gives_mtls_with_the_certificates_read(temporal_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ca = trustme.CA()
    client = ca.issue_cert("worker")
    ca_file, cert, key = tmp_path / "ca.pem", tmp_path / "client.pem", tmp_path / "client-key.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    client.cert_chain_pems[0].write_to_path(str(cert))
    client.private_key_pem.write_to_path(str(key))
    profile = tmp_path / "temporal.toml"
    profile.write_text(f'[profile.prod]\naddress = "prod.a1b2c.tmprl.cloud:7233"\nnamespace = "prod.a1b2c"\n'
                       f'[profile.prod.tls]\nserver_ca_cert_path = "{ca_file}"\nclient_cert_path = "{cert}"\n'
                       f'client_key_path = "{key}"\n')
    temporal_env.setenv("TEMPORAL_CONFIG_FILE", str(profile))
    temporal_env.setenv("TEMPORAL_PROFILE", "prod")
    options = connect_options(Settings())
    assert options["target_host"] == "prod.a1b2c.tmprl.cloud:7233"
    tls = options["tls"]
    assert isinstance(tls, TLSConfig)
    assert (tls.server_root_ca_cert, tls.client_cert, tls.client_private_key) == (
        ca_file.read_bytes(), cert.read_bytes(), key.read_bytes())


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("TEMPORAL_CONFIG_FILE", "/nonexistent/temporal.toml", "no such file"),
    ("TEMPORAL_PROFILE", "staging", "staging"),
    ("TEMPORAL_TLS_CLIENT_CERT_PATH", "/nonexistent/client.pem", "client.pem"),
])
def test_a_profile_that_cannot_be_used_is_an_error_not_a_local_connection(
    temporal_env: pytest.MonkeyPatch, variable: str, value: str, message: str,
) -> None:
    temporal_env.setenv(variable, value)
    if variable == "TEMPORAL_TLS_CLIENT_CERT_PATH":
        temporal_env.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", "/nonexistent/client-key.pem")
    with pytest.raises(TemporalConfigError, match=message):
        connect_options(Settings())


@pytest.mark.parametrize(("address", "cloud"), [
    ("prod.a1b2c.tmprl.cloud:7233", True), ("us-east-1.aws.api.temporal.io:7233", True),
    ("127.0.0.1:7233", False), ("temporal-frontend.temporal.svc:7233", False), ("tmprl.cloud.example:7233", False),
])
def test_temporal_cloud_is_told_by_its_endpoints(address: str, cloud: bool) -> None:
    assert is_temporal_cloud(address) is cloud


def test_on_temporal_cloud_the_missing_attributes_come_as_one_tcld_command() -> None:
    lines = _instructions("prod.a1b2c", True, ["TaskStatus", "Provider"], {})
    assert lines[0] == ("tcld namespace search-attributes add --namespace prod.a1b2c "
                        "--search-attribute TaskStatus=Keyword --search-attribute Provider=Keyword")
    self_hosted = _instructions("default", False, list(REQUIRED), {"Locale": "Int"})
    assert sum("temporal operator search-attribute create" in line for line in self_hosted) == len(REQUIRED)
    assert any("Locale is registered as Int" in line for line in self_hosted)


class _RefusingCloud:
    """A Temporal Cloud namespace, reached over PrivateLink (a VPC endpoint address, Cloud's name
    in TLS), whose credentials may neither list nor add search attributes."""

    namespace = "prod.a1b2c"

    def __init__(self) -> None:
        self.service_client = SimpleNamespace(config=SimpleNamespace(
            target_host="vpce-0a1b2c.vpce-svc-0123.us-east-1.vpce.amazonaws.com:7233",
            tls=TLSConfig(domain="prod.a1b2c.tmprl.cloud")))
        self.workflow_service = SimpleNamespace(describe_namespace=self._answer)
        self.operator_service = SimpleNamespace(list_search_attributes=self._refuse, add_search_attributes=self._refuse)
        self.add_requests = 0

    async def _answer(self, request: object) -> object:
        return object()

    async def _refuse(self, request: object) -> object:
        self.add_requests += type(request).__name__ == "AddSearchAttributesRequest"
        raise RPCError("Request unauthorized.", RPCStatusCode.PERMISSION_DENIED, b"")


async def test_setup_on_cloud_without_leave_reports_what_to_add_instead_of_failing() -> None:
    cloud = _RefusingCloud()
    report = await setup_namespace(cloud)  # type: ignore[arg-type]
    assert cloud.add_requests == 1
    assert (report.cloud, report.ok, report.added, report.missing) == (True, False, [], list(REQUIRED))
    assert report.instructions[0].startswith("tcld namespace search-attributes add --namespace prod.a1b2c ")


# Every optional variable the Kubernetes Secret and the compose env may hold, empty unless a case sets it.
_OPTIONAL = ("TEMPORAL_API_KEY", "TEMPORAL_TLS", "TEMPORAL_TLS_SERVER_NAME", "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
             "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_PROFILE",
             "TEMPORAL_CONFIG_FILE")


def _certificates(folder: Path) -> dict[str, str]:
    client = trustme.CA().issue_cert("worker")
    cert, key = folder / "client.pem", folder / "client-key.pem"
    client.cert_chain_pems[0].write_to_path(str(cert))
    client.private_key_pem.write_to_path(str(key))
    return {"TEMPORAL_TLS_CLIENT_CERT_PATH": str(cert), "TEMPORAL_TLS_CLIENT_KEY_PATH": str(key)}


@pytest.mark.parametrize("case", ["none", "api key", "mtls", "tls without key"])
def test_an_empty_optional_variable_is_unset_in_every_combination(
    temporal_env: pytest.MonkeyPatch, tmp_path: Path, case: str,
) -> None:
    """A Secret or env file that lists an optional key with no value means "not set": an empty
    TEMPORAL_API_KEY (or TLS variable) must not switch TLS on against a plaintext frontend."""
    given = {name: "" for name in _OPTIONAL}
    given |= {"TEMPORAL_ADDRESS": "temporal-frontend.temporal:7233", "TEMPORAL_NAMESPACE": "reelqueue"}
    given |= {"none": {}, "api key": {"TEMPORAL_API_KEY": "key-1"}, "mtls": _certificates(tmp_path),
              "tls without key": {"TEMPORAL_TLS": "true"}}[case]
    for name, value in given.items():
        temporal_env.setenv(name, value)
    options = connect_options(Settings())
    assert (options.pop("target_host"), options.pop("namespace")) == ("temporal-frontend.temporal:7233", "reelqueue")
    tls = options.pop("tls", False)
    if case == "none":
        assert (tls, options) == (False, {})
    elif case == "api key":
        assert (tls, options) == (True, {"api_key": "key-1"})
    elif case == "mtls":
        assert isinstance(tls, TLSConfig) and options == {}
        assert (tls.client_cert, tls.domain) == (Path(given["TEMPORAL_TLS_CLIENT_CERT_PATH"]).read_bytes(), None)
    else:
        assert isinstance(tls, TLSConfig) and options == {}
        assert (tls.client_cert, tls.server_root_ca_cert, tls.domain) == (None, None, None)


def test_temporal_ui_links_name_the_namespace_the_process_connects_to(temporal_env: pytest.MonkeyPatch) -> None:
    """On Kubernetes the namespace comes from TEMPORAL_NAMESPACE (the profile), not REELQUEUE_*."""
    from gateway.review import review_deps_from_settings

    temporal_env.setenv("TEMPORAL_NAMESPACE", "reelqueue-prod")
    temporal_env.setenv("REELQUEUE_TEMPORAL_UI_URL", "https://temporal-ui.example.com")
    deps = review_deps_from_settings()
    assert (deps.namespace, deps.temporal_ui_url) == ("reelqueue-prod", "https://temporal-ui.example.com")
