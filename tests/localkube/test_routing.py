"""Path resolution (:func:`localkube.routing.resolve`): percent-encoded segments decode."""

from __future__ import annotations

import pytest

from localkube.errors import ApiError
from localkube.resources import ResourceRegistry
from localkube.routing import Route, resolve


def test_plain_and_percent_encoded_paths_resolve_alike() -> None:
    registry = ResourceRegistry()
    plain = resolve(registry, "/api/v1/namespaces/default/configmaps/a-b")
    assert isinstance(plain, Route)
    assert (plain.namespace, plain.name, plain.subresource) == ("default", "a-b", "")
    encoded = resolve(registry, "/api/v1/namespaces/def%61ult/configmaps/a%2Db")
    assert isinstance(encoded, Route)
    assert (encoded.rt, encoded.namespace, encoded.name) == (plain.rt, "default", "a-b")
    status = resolve(registry, "/api/v1/namespaces/default/pods/p/status")
    assert isinstance(status, Route)
    assert status.subresource == "status"
    assert resolve(registry, "/apis/apps/v1") == ("apps", "v1")
    assert resolve(registry, "/healthz") is None
    with pytest.raises(ApiError):
        resolve(registry, "/api/v1/namespaces/default/nothings")
