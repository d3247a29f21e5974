"""No credential file kr8s writes outlives its use (krt.kube.kr8s_auth, krt.kube.tls_material).

kr8s writes ``certificate-authority-data``, ``client-certificate-data`` and ``client-key-data``
to ``NamedTemporaryFile(delete=False)`` files on every load and re-authentication. Each test
points ``tempfile`` at a private directory *after* its servers are up (localkube's own PKI
directory lives in the temporary directory too) and asserts what is left there.
"""

from __future__ import annotations

import base64
import inspect
import json
import ssl
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme
import yaml
from kr8s import _auth as kr8s_auth_module
from kr8s._auth import KubeAuth
from mtls_fake import VERSION, mtls_server

from krt import pem_files
from krt.kube import errors
from krt.kube.client import ConfigError, Kube, connect
from krt.kube.kr8s_auth import (
    AUTH_ARGUMENTS,
    Kr8sInternalsChanged,
    ScrubbingKubeAuth,
    private_api,
    uses_client_certificate,
)
from krt.kube.resources import NAMESPACES
from krt.kube.tls_material import Pem, TlsMaterial, TlsMaterialError, build_ssl_context
from localkube.apiserver import ApiServerHandle

USER = "krt-test-user"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def private_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point ``tempfile`` (kr8s's NamedTemporaryFile included) at a fresh empty directory."""
    directory = tmp_path / "tempdir"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.fixture(scope="module")
def client_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def client_leaf(client_ca: trustme.CA) -> trustme.LeafCert:
    return client_ca.issue_cert("user@example.invalid", common_name=USER)


def write_kubeconfig(
    path: Path, *, server: str, cluster: dict[str, Any], user: dict[str, Any]
) -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(document))
    return path


def inline_user(leaf: trustme.LeafCert) -> dict[str, str]:
    return {
        "client-certificate-data": b64(leaf.cert_chain_pems[0].bytes()),
        "client-key-data": b64(leaf.private_key_pem.bytes()),
    }


# -- against localkube (CA data + token + client certificate data) ---------------------------


async def test_inline_credentials_leave_no_file_through_reloads_and_reconnects(
    apiserver: ApiServerHandle,
    client_leaf: trustme.LeafCert,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = write_kubeconfig(
        tmp_path / "kubeconfig",
        server=apiserver.url,
        cluster={"certificate-authority-data": b64(apiserver.ca_pem)},
        user={"token": apiserver.admin_token, **inline_user(client_leaf)},
    )
    private = private_tempdir(tmp_path, monkeypatch)
    kube = await connect(kubeconfig=config)
    try:
        assert leftovers(private) == []
        material = kube.api.auth.tls_material
        assert material.ca == Pem(data=apiserver.ca_pem)  # kept in memory, not as a path
        assert material.client_key == Pem(data=client_leaf.private_key_pem.bytes())
        await kube.get(NAMESPACES, "default")
        # kr8s's own httpx session builds its TLS context from the same material
        assert (await kube.api.version())["major"] == "1"
        # a 401 makes the client reload credentials through kr8s (which writes them again)
        kube.api.auth.token = "expired"
        before = kube.requests
        await kube.get(NAMESPACES, "default")
        assert kube.requests == before + 2
        await kube.api.auth.reauthenticate()
        assert leftovers(private) == []
        # closing drops both sessions; the next requests rebuild both TLS contexts
        await kube.aclose()
        await kube.get(NAMESPACES, "default")
        assert (await kube.api.version())["major"] == "1"
    finally:
        await kube.aclose()
    assert leftovers(private) == []


async def test_an_unauthorized_connect_leaves_no_file(
    apiserver: ApiServerHandle,
    client_leaf: trustme.LeafCert,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = write_kubeconfig(
        tmp_path / "kubeconfig",
        server=apiserver.url,
        cluster={"certificate-authority-data": b64(apiserver.ca_pem)},
        user={"token": "not-a-token", **inline_user(client_leaf)},
    )
    private = private_tempdir(tmp_path, monkeypatch)
    with pytest.raises(errors.Unauthorized):
        await connect(kubeconfig=config)  # loads twice: at connect and after the 401
    assert leftovers(private) == []


async def test_a_load_failing_after_kr8s_wrote_its_files_removes_them(
    apiserver: ApiServerHandle,
    client_leaf: trustme.LeafCert,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # kr8s writes the three files, then rejects username/password authentication
    config = write_kubeconfig(
        tmp_path / "kubeconfig",
        server=apiserver.url,
        cluster={"certificate-authority-data": b64(apiserver.ca_pem)},
        user={"username": "u", "password": "p", **inline_user(client_leaf)},
    )
    private = private_tempdir(tmp_path, monkeypatch)
    with pytest.raises(ConfigError, match="username/password"):
        await connect(kubeconfig=config)
    assert leftovers(private) == []


async def test_serviceaccount_ca_file_is_used_in_place_and_kept(
    apiserver: ApiServerHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = private_tempdir(tmp_path, monkeypatch)
    sa = private / "tmp-serviceaccount"  # even inside the temporary directory
    sa.mkdir()
    (sa / "token").write_text(apiserver.admin_token)
    (sa / "ca.crt").write_bytes(apiserver.ca_pem)
    (sa / "namespace").write_text("default")
    host, port = apiserver.url.removeprefix("https://").rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    async with await connect(serviceaccount_dir=sa) as kube:
        assert kube.api.auth.tls_material.ca == Pem(path=str(sa / "ca.crt"))
        await kube.api.auth.reauthenticate()
        await kube.get(NAMESPACES, "default")
    assert leftovers(private) == ["tmp-serviceaccount"]
    assert (sa / "ca.crt").read_bytes() == apiserver.ca_pem


# -- against a server that requires a client certificate ---------------------------------------


async def test_inline_client_certificate_is_presented_from_memory(
    client_ca: trustme.CA,
    client_leaf: trustme.LeafCert,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with mtls_server(client_ca) as server:
        config = write_kubeconfig(
            tmp_path / "kubeconfig",
            server=server.url,
            cluster={"certificate-authority-data": b64(server.server_ca.cert_pem.bytes())},
            user=inline_user(client_leaf),
        )
        private = private_tempdir(tmp_path, monkeypatch)
        async with await connect(kubeconfig=config) as kube:
            assert uses_client_certificate(kube.api.auth)
            with pytest.raises(ConfigError, match="client certificate"):
                kube.with_token("a-token")
            assert await kube.request("GET", NAMESPACES) == {"path": "/api/v1/namespaces"}
            assert await kube.api.version() == VERSION  # kr8s's session presents it too
            await kube.api.auth.reauthenticate()
            await kube.aclose()
            await kube.request("GET", NAMESPACES)
        assert server.client_names
        assert set(server.client_names) == {USER}
        assert leftovers(private) == []


async def test_the_fake_server_refuses_a_client_without_certificate(
    client_ca: trustme.CA, tmp_path: Path
) -> None:
    async with mtls_server(client_ca) as server:
        config = write_kubeconfig(
            tmp_path / "kubeconfig",
            server=server.url,
            cluster={"certificate-authority-data": b64(server.server_ca.cert_pem.bytes())},
            user={"token": "t"},
        )
        with pytest.raises(errors.ConnectionFailed):
            await connect(kubeconfig=config)


async def test_files_named_by_path_are_used_and_never_deleted(
    client_ca: trustme.CA,
    client_leaf: trustme.LeafCert,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with mtls_server(client_ca) as server:
        private = private_tempdir(tmp_path, monkeypatch)
        # named like kr8s's own temporary files, in the temporary directory
        named = {
            "tmpca0000": server.server_ca.cert_pem.bytes(),
            "tmpcert000": client_leaf.cert_chain_pems[0].bytes(),
            "tmpkey0000": client_leaf.private_key_pem.bytes(),
        }
        for name, content in named.items():
            (private / name).write_bytes(content)
        config = write_kubeconfig(
            tmp_path / "kubeconfig",
            server=server.url,
            cluster={"certificate-authority": str(private / "tmpca0000")},
            user={
                "client-certificate": str(private / "tmpcert000"),
                "client-key": str(private / "tmpkey0000"),
            },
        )
        async with await connect(kubeconfig=config) as kube:
            material = kube.api.auth.tls_material
            assert material.client_key == Pem(path=str(private / "tmpkey0000"))
            await kube.request("GET", NAMESPACES)
            assert await kube.api.version() == VERSION
            await kube.api.auth.reauthenticate()
            await kube.aclose()
            await kube.request("GET", NAMESPACES)
        assert server.client_names
        assert set(server.client_names) == {USER}
        assert leftovers(private) == sorted(named)
        for name, content in named.items():
            assert (private / name).read_bytes() == content


async def test_inline_data_beside_a_named_file_removes_only_kr8s_s_copy(
    client_ca: trustme.CA,
    client_leaf: trustme.LeafCert,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = client_ca.issue_cert("other@example.invalid", common_name="someone-else")
    async with mtls_server(client_ca) as server:
        private = private_tempdir(tmp_path, monkeypatch)
        (private / "tmpkeyfile").write_bytes(other.private_key_pem.bytes())
        (private / "tmpcertfile").write_bytes(other.cert_chain_pems[0].bytes())
        config = write_kubeconfig(
            tmp_path / "kubeconfig",
            server=server.url,
            cluster={"certificate-authority-data": b64(server.server_ca.cert_pem.bytes())},
            user={  # kr8s (like client-go) lets the inline data win
                "client-certificate": str(private / "tmpcertfile"),
                "client-key": str(private / "tmpkeyfile"),
                **inline_user(client_leaf),
            },
        )
        async with await connect(kubeconfig=config) as kube:
            await kube.request("GET", NAMESPACES)
        assert set(server.client_names) == {USER}
        assert leftovers(private) == ["tmpcertfile", "tmpkeyfile"]


async def test_exec_plugin_certificates_leave_no_file(
    client_ca: trustme.CA,
    client_leaf: trustme.LeafCert,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {
            "clientCertificateData": client_leaf.cert_chain_pems[0].bytes().decode(),
            "clientKeyData": client_leaf.private_key_pem.bytes().decode(),
        },
    }
    plugin = tmp_path / "plugin.py"
    plugin.write_text(f"print({json.dumps(json.dumps(answer))})\n")
    async with mtls_server(client_ca) as server:
        config = write_kubeconfig(
            tmp_path / "kubeconfig",
            server=server.url,
            cluster={"certificate-authority-data": b64(server.server_ca.cert_pem.bytes())},
            user={
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": sys.executable,
                    "args": [str(plugin)],
                }
            },
        )
        private = private_tempdir(tmp_path, monkeypatch)
        async with await connect(kubeconfig=config) as kube:
            await kube.request("GET", NAMESPACES)
            await kube.api.auth.reauthenticate()  # runs the plugin again
        assert set(server.client_names) == {USER}
        assert leftovers(private) == []


# -- kr8s changing its internals fails loudly ---------------------------------------------------


def patch_kr8s_load(
    monkeypatch: pytest.MonkeyPatch, after_load: Callable[[KubeAuth], None]
) -> None:
    """Make kr8s's kubeconfig loading do ``after_load`` once it has finished."""
    original = KubeAuth._load_kubeconfig

    async def load(self: KubeAuth) -> None:
        await original(self)
        after_load(self)

    monkeypatch.setattr(KubeAuth, "_load_kubeconfig", load)


async def test_a_kr8s_file_elsewhere_fails_loudly_and_is_not_deleted(
    apiserver: ApiServerHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def move_ca(auth: KubeAuth) -> None:
        target = elsewhere / Path(str(auth.server_ca_file)).name
        Path(str(auth.server_ca_file)).rename(target)
        auth.server_ca_file = str(target)

    patch_kr8s_load(monkeypatch, move_ca)
    private_tempdir(tmp_path, monkeypatch)
    with pytest.raises(Kr8sInternalsChanged, match="certificate-authority-data"):
        await connect(kubeconfig=apiserver.kubeconfig_path)
    assert len(list(elsewhere.iterdir())) == 1


async def test_kr8s_no_longer_writing_a_file_fails_loudly(
    apiserver: ApiServerHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def forget_ca(auth: KubeAuth) -> None:
        Path(str(auth.server_ca_file)).unlink()
        auth.server_ca_file = None

    patch_kr8s_load(monkeypatch, forget_ca)
    private_tempdir(tmp_path, monkeypatch)
    with pytest.raises(Kr8sInternalsChanged, match="needs an update"):
        await connect(kubeconfig=apiserver.kubeconfig_path)


def test_kr8s_auth_has_the_attributes_relied_on() -> None:
    auth = ScrubbingKubeAuth(kubeconfig="/nonexistent")
    for name in ("client_key_file", "client_cert_file", "server_ca_file"):
        assert getattr(auth, name) is None
    assert auth._user == {}
    assert auth._cluster == {}
    assert auth._insecure_skip_tls_verify is False
    assert auth.tls_material == TlsMaterial()


async def test_the_client_s_kr8s_api_uses_the_scrubbing_auth(
    apiserver: ApiServerHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with await connect(kubeconfig=apiserver.kubeconfig_path, context="localkube") as kube:
        assert isinstance(kube, Kube)
        assert type(kube.api.auth) is ScrubbingKubeAuth
        assert kube.api.auth.active_context == "localkube"


# -- build_ssl_context (no I/O besides the in-memory or private files) ---------------------------


def test_nothing_configured_means_the_default_context() -> None:
    assert build_ssl_context(TlsMaterial()) is None


async def test_scrubbing_auth_answers_true_when_nothing_is_configured() -> None:
    assert await ScrubbingKubeAuth(kubeconfig="/nonexistent").ssl_context() is True


def test_inline_ca_is_trusted_as_pem_or_der() -> None:
    ca = trustme.CA()
    pem = ca.cert_pem.bytes()
    der = ssl.PEM_cert_to_DER_cert(pem.decode())
    for data in (pem, der):
        context = build_ssl_context(TlsMaterial(ca=Pem(data=data)))
        assert context is not None
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert context.check_hostname
        assert context.get_ca_certs(binary_form=True) == [der]


def test_insecure_skip_tls_verify_turns_off_both_checks() -> None:
    context = build_ssl_context(TlsMaterial(insecure_skip_tls_verify=True))
    assert context is not None
    assert context.verify_mode == ssl.CERT_NONE
    assert not context.check_hostname


def test_a_pem_holds_exactly_one_of_data_and_path() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Pem()
    with pytest.raises(ValueError, match="exactly one"):
        Pem(data=b"x", path="/x")


@pytest.mark.parametrize("memfd", [True, False], ids=["memfd", "private-directory"])
def test_inline_client_key_is_loaded_without_leaving_a_file(
    memfd: bool, client_leaf: trustme.LeafCert, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if memfd and not pem_files.memfd_usable():
        pytest.skip("no memfd_create or /proc/self/fd here")
    monkeypatch.setattr(pem_files, "memfd_usable", lambda: memfd)
    private = private_tempdir(tmp_path, monkeypatch)
    cert = Pem(data=client_leaf.cert_chain_pems[0].bytes())
    key = Pem(data=client_leaf.private_key_pem.bytes())
    assert build_ssl_context(TlsMaterial(client_cert=cert, client_key=key)) is not None
    # a key that does not match the certificate is refused, and nothing is left either
    other = trustme.CA().issue_cert("x.example").private_key_pem.bytes()
    with pytest.raises(
        TlsMaterialError, match=r"client-key-data\) do not load: key values mismatch"
    ):
        build_ssl_context(TlsMaterial(client_cert=cert, client_key=Pem(data=other)))
    assert leftovers(private) == []


def test_only_a_complete_certificate_pair_is_loaded(client_leaf: trustme.LeafCert) -> None:
    # kr8s's (and client-go's) rule: a certificate without its key is ignored, not an error
    cert = Pem(data=client_leaf.cert_chain_pems[0].bytes())
    material = TlsMaterial(client_cert=cert)
    assert not material.has_client_certificate
    assert build_ssl_context(material) is not None


def test_uses_client_certificate_reads_plain_kr8s_auth_too() -> None:
    auth = KubeAuth(kubeconfig="/nonexistent")
    assert not uses_client_certificate(auth)
    auth.client_cert_file, auth.client_key_file = "/c", "/k"
    assert uses_client_certificate(auth)


async def test_concurrent_reloads_leave_no_file(
    apiserver: ApiServerHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = private_tempdir(tmp_path, monkeypatch)
    async with await connect(kubeconfig=apiserver.kubeconfig_path) as kube:
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(kube.api.auth.reauthenticate)
        await kube.get(NAMESPACES, "default")
    assert leftovers(private) == []


async def test_a_load_failing_at_kr8s_s_write_never_deletes_the_named_file(
    apiserver: ApiServerHandle,
    client_leaf: trustme.LeafCert,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    private = private_tempdir(tmp_path, monkeypatch)
    named = private / "tmpnamedkey"  # looks like one of kr8s's files, but the kubeconfig names it
    named.write_bytes(client_leaf.private_key_pem.bytes())
    config = write_kubeconfig(
        tmp_path / "kubeconfig",
        server=apiserver.url,
        cluster={"certificate-authority-data": b64(apiserver.ca_pem)},
        user={"client-key": str(named), **inline_user(client_leaf)},
    )

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    # kr8s has set client_key_file to the named file, then fails to write the inline key
    monkeypatch.setattr(kr8s_auth_module, "NamedTemporaryFile", full_disk)
    with pytest.raises(errors.ConnectionFailed, match="(?i)no space left"):
        await connect(kubeconfig=config)
    assert leftovers(private) == ["tmpnamedkey"]


async def test_private_api_for_direct_kr8s_users_leaves_no_file(
    apiserver: ApiServerHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = private_tempdir(tmp_path, monkeypatch)
    api = await private_api(kubeconfig=str(apiserver.kubeconfig_path))
    assert type(api.auth) is ScrubbingKubeAuth
    assert (await api.version())["major"] == "1"
    await api.auth.reauthenticate()
    namespaces = [ns.name async for ns in api.async_get("namespaces")]
    assert "default" in namespaces
    assert leftovers(private) == []


def test_kr8s_passes_the_auth_arguments_relied_on() -> None:
    # kr8s's Api gives its KubeAuth exactly these arguments; a new one would be lost
    parameters = set(inspect.signature(KubeAuth.__init__).parameters) - {"self"}
    assert parameters == set(AUTH_ARGUMENTS)


async def test_a_client_key_that_does_not_match_is_a_configuration_error(
    apiserver: ApiServerHandle, client_leaf: trustme.LeafCert, tmp_path: Path
) -> None:
    other_key = trustme.CA().issue_cert("x.example").private_key_pem.bytes()
    config = write_kubeconfig(
        tmp_path / "kubeconfig",
        server=apiserver.url,
        cluster={"certificate-authority-data": b64(apiserver.ca_pem)},
        user={
            "token": apiserver.admin_token,
            **inline_user(client_leaf),
            "client-key-data": b64(other_key),
        },
    )
    with pytest.raises(ConfigError) as caught:
        await connect(kubeconfig=config)
    message = str(caught.value)
    assert message.startswith("the kubeconfig's TLS settings: the client certificate and key")
    assert "client-key-data) do not load: key values mismatch" in message
    assert "reach" not in message
