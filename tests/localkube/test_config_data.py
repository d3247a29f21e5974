"""ConfigMap and Secret payloads: types (400), keys and size (422), Secret ``stringData``.

Spec: issue 3, built-in kinds ConfigMap and Secret, faithful to kube-apiserver. Found by the
adversarial review: ``stringData`` was stored verbatim (so ``data`` lacked the values),
and numbers, bad base64 and bad keys were accepted.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from localkube import config_data

CM = "/api/v1/namespaces/default/configmaps"
SECRETS = "/api/v1/namespaces/default/secrets"
MERGE = {"Content-Type": "application/merge-patch+json"}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def test_secret_string_data_is_folded_into_data_on_every_write(
    admin_http: httpx.AsyncClient,
) -> None:
    r = await admin_http.post(
        SECRETS,
        json={
            "metadata": {"name": "s"},
            "data": {"a": b64("old"), "b": b64("kept")},
            "stringData": {"a": "new", "c": "h\u00e9"},
        },
    )
    assert r.status_code == 201, r.text
    created = r.json()
    assert "stringData" not in created
    assert created["data"] == {"a": b64("new"), "b": b64("kept"), "c": b64("h\u00e9")}
    r = await admin_http.patch(f"{SECRETS}/s", json={"stringData": {"d": "x"}}, headers=MERGE)
    assert r.status_code == 200, r.text
    assert r.json()["data"]["d"] == b64("x")
    assert "stringData" not in r.json()
    stored = (await admin_http.get(f"{SECRETS}/s")).json()
    assert "stringData" not in stored
    assert set(stored["data"]) == {"a", "b", "c", "d"}


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        (
            CM,
            {"data": {"k": 5}},
            'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot '
            "unmarshal number into Go struct field ConfigMap.data of type string",
        ),
        (
            CM,
            {"data": "x"},
            'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot '
            "unmarshal string into Go struct field ConfigMap.data of type map[string]string",
        ),
        (
            CM,
            {"binaryData": {"k": "!!"}},
            'ConfigMap in version "v1" cannot be handled as a ConfigMap: illegal base64 data '
            "at input byte 0",
        ),
        (
            SECRETS,
            {"data": {"k": "not base64"}},
            'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at '
            "input byte 3",
        ),
        (
            SECRETS,
            {"stringData": {"k": True}},
            'Secret in version "v1" cannot be handled as a Secret: json: cannot unmarshal '
            "bool into Go struct field Secret.stringData of type string",
        ),
    ],
)
async def test_wrongly_typed_payloads_are_400(
    admin_http: httpx.AsyncClient, path: str, body: dict[str, Any], message: str
) -> None:
    r = await admin_http.post(path, json={"metadata": {"name": "x"}, **body})
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "BadRequest"
    assert r.json()["message"] == message
    assert (await admin_http.get(f"{path}/x")).status_code == 404


@pytest.mark.parametrize(
    ("path", "body", "field", "message"),
    [
        (
            CM,
            {"data": {"bad key/": "v"}},
            "data[bad key/]",
            'Invalid value: "bad key/": a valid config key must consist of alphanumeric',
        ),
        (SECRETS, {"data": {"..x": ""}}, "data[..x]", 'Invalid value: "..x": must not start'),
        (
            CM,
            {"data": {"k": "v"}, "binaryData": {"k": ""}},
            "data[k]",
            'Invalid value: "k": duplicate of key present in binaryData',
        ),
        (
            CM,
            {"data": {"k": "x" * (1024 * 1024)}},
            "[]",
            "Too long: may not be more than 1048576 bytes",
        ),
        (
            SECRETS,
            {"stringData": {"k": "x" * (1024 * 1024)}},
            "data",
            "Too long: may not be more than 1048576 bytes",
        ),
    ],
)
async def test_bad_keys_and_oversized_payloads_are_422(
    admin_http: httpx.AsyncClient, path: str, body: dict[str, Any], field: str, message: str
) -> None:
    r = await admin_http.post(path, json={"metadata": {"name": "x"}, **body})
    assert r.status_code == 422, r.text
    cause = r.json()["details"]["causes"][0]
    assert cause["field"] == field
    assert cause["message"].startswith(message), cause


async def test_valid_payloads_round_trip(admin_http: httpx.AsyncClient) -> None:
    r = await admin_http.post(
        CM,
        json={
            "metadata": {"name": "ok"},
            "data": {"a.b_C-1": "x", "null": None},
            "binaryData": {"bin": "AAE=\n"},
        },
    )
    assert r.status_code == 201, r.text
    assert r.json()["data"] == {"a.b_C-1": "x", "null": ""}


def test_config_key_rules() -> None:
    assert config_data.config_key_problems("ok.key_-1") == []
    assert config_data.config_key_problems(".") == ["must not be '.'"]
    assert config_data.config_key_problems("..") == ["must not be '..'"]
    assert "must be no more than 253 characters" in config_data.config_key_problems("k" * 254)
