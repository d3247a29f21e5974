"""The function endpoint path and URL: one builder, one parser (seed 000 Invoke Contract)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from krt.api.endpoint import (
    FunctionEndpointRef,
    function_endpoint_path,
    function_endpoint_url,
    parse_function_endpoint_path,
    parse_function_endpoint_url,
)
from krt.api.errors import EndpointPathError

UID = "2c24c1f0-9f8f-4f80-82d5-3dd16a12d1e6"
BASE = "https://runtime-gateway.kruntimes-system.svc.cluster.local"


def test_path_shape() -> None:
    assert function_endpoint_path("kruntimes-demo", "python", UID) == (
        f"/v1/namespaces/kruntimes-demo/runtimes/python/functions/{UID}:invoke"
    )


def test_url_and_round_trip() -> None:
    url = function_endpoint_url(BASE + "/", "kruntimes-demo", "python", UID)
    assert url == f"{BASE}/v1/namespaces/kruntimes-demo/runtimes/python/functions/{UID}:invoke"
    assert parse_function_endpoint_url(url) == (
        BASE,
        FunctionEndpointRef("kruntimes-demo", "python", UID),
    )
    prefixed = function_endpoint_url("https://gw:8443/prefix", "a", "b", UID)
    assert parse_function_endpoint_url(prefixed)[0] == "https://gw:8443/prefix"


_LABEL = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z")


@given(_LABEL, _LABEL, st.uuids())
def test_parse_inverts_build(namespace: str, runtime: str, uid: object) -> None:
    path = function_endpoint_path(namespace, runtime, str(uid))
    assert parse_function_endpoint_path(path) == FunctionEndpointRef(namespace, runtime, str(uid))


@pytest.mark.parametrize(
    "path",
    [
        f"/v1/namespaces/demo/runtimes/python/runs/{UID}:invoke",
        f"/v1/namespaces/demo/runtimes/python/functions/{UID}",
        f"/v1/namespaces/demo/runtimes/python/functions/{UID}:invoke/extra",
        f"/v2/namespaces/demo/runtimes/python/functions/{UID}:invoke",
        f"/v1/namespaces/Demo/runtimes/python/functions/{UID}:invoke",
        f"/v1/namespaces/demo/runtimes/py_thon/functions/{UID}:invoke",
        "/v1/namespaces/demo/runtimes/python/functions/..:invoke",
        f"/v1/namespaces/demo/runtimes/python/functions/{UID}:invoke?x=1",
        f"/v1/namespaces/demo/runtimes/python/functions/{UID}:invoke\n",
        "",
    ],
)
def test_bad_paths_are_rejected(path: str) -> None:
    with pytest.raises(EndpointPathError):
        parse_function_endpoint_path(path)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("Demo", "python", UID), "namespace"),
        (("demo", "a" * 64, UID), "runtime"),
        (("demo", "python", "a/b"), "uid"),
        (("demo", "python", ""), "uid"),
    ],
)
def test_bad_components_name_the_field(args: tuple[str, str, str], field: str) -> None:
    with pytest.raises(EndpointPathError) as caught:
        function_endpoint_path(*args)
    assert caught.value.field == field


@pytest.mark.parametrize(
    "base", ["runtime-gateway", "ftp://gw", "https://gw?x=1", "https://gw#f", "https://gé"]
)
def test_bad_base_urls(base: str) -> None:
    with pytest.raises(EndpointPathError) as caught:
        function_endpoint_url(base, "a", "b", UID)
    assert caught.value.field == "baseURL"


def test_url_limit_is_2048_bytes() -> None:
    path_len = len(function_endpoint_path("a", "b", UID))
    base = "https://g/" + "p" * (2048 - path_len - len("https://g/"))
    assert len(function_endpoint_url(base, "a", "b", UID)) == 2048
    with pytest.raises(EndpointPathError, match="2049 bytes exceed the limit of 2048"):
        function_endpoint_url(base + "p", "a", "b", UID)


def test_parse_url_rejects_other_urls() -> None:
    for url in ["https://gw/healthz", "gw/v1/namespaces/a/runtimes/b/functions/c:invoke"]:
        with pytest.raises(EndpointPathError):
            parse_function_endpoint_url(url)
