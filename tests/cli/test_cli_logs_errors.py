"""``krt logs`` says in words why the log could not be read (no Python reprs)."""

from __future__ import annotations

import pytest

from krt.cli.logs import pod_log_lines
from krt.kube.client import connect
from krt.kube.errors import ConnectionFailed
from localkube.apiserver import ApiServerConfig, running_apiserver


async def test_an_api_server_gone_away_reads_as_words() -> None:
    async with running_apiserver(ApiServerConfig()) as handle:
        kube = await connect(kubeconfig=handle.kubeconfig_path)
    async with kube:  # the API server has stopped: nothing listens on its port
        with pytest.raises(ConnectionFailed) as failed:
            async for _ in pod_log_lines(kube, "default", "p", follow=False):
                pass
    assert str(failed.value) == "log of pod default/p: connection refused"
