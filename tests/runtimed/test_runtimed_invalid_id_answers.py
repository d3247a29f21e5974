"""runtimed's client never reads a refused request as "no such execution".

The Runtime Servers answer Status/Cancel/Forget of an ID Execute would refuse with
INVALID_ARGUMENT (``tests/servers/test_runtime_id_arguments.py``). runtimed sends Run UIDs
only, but if a server refused one, Status must not become NOT_FOUND (which would start an
Execute) and Cancel/Forget must not count as done: each is :class:`RpcRejected`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from runtimed_servers import runtime_server

from runtimed.runtime_client import RpcRejected, RuntimeServerClient


async def test_invalid_argument_is_rejected_not_not_found(tmp_path: Path) -> None:
    async with (
        runtime_server("bash", tmp_path / "srv") as (port, _),
        trio.open_nursery() as nursery,
    ):
        client = RuntimeServerClient("127.0.0.1", port)
        await nursery.start(client.run)
        for call in (client.status, client.cancel, client.forget):
            with pytest.raises(RpcRejected) as rejected:
                await call("")
            assert rejected.value.code == "INVALID_ARGUMENT"
            assert "id is required" in str(rejected.value)
        nursery.cancel_scope.cancel()
