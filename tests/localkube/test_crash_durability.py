"""``kill -9`` of ``localkube apiserver`` mid-write: every acknowledged write survives.

Spec: issue 3, "Storage" (SQLite under ``--state-dir``; objects survive a restart,
resourceVersions keep increasing; a crash never leaves a half-applied update). Runs the
real console entry point as a process, writes with concurrent clients, kills it with
SIGKILL while requests are in flight, restarts it on the same state directory.
"""

from __future__ import annotations

import base64
import signal
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.lowlevel
import yaml

CM = "/api/v1/namespaces/default/configmaps"


async def _start(state_dir: Path) -> tuple[trio.Process, httpx.AsyncClient]:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "localkube.cli", "apiserver", "--state-dir", str(state_dir)]
        + ["--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    output = b""
    with trio.fail_after(15):
        while b"export KUBECONFIG=" not in output:
            chunk = await process.stdout.receive_some()
            assert chunk, "localkube apiserver exited before serving"
            output += chunk
    config = yaml.safe_load((state_dir / "kubeconfig").read_text())
    cluster = config["clusters"][0]["cluster"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    client = httpx.AsyncClient(
        base_url=cluster["server"],
        verify=context,
        headers={"Authorization": f"Bearer {config['users'][0]['user']['token']}"},
        timeout=10.0,
    )
    return process, client


async def test_kill_9_mid_write_loop_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    process, client = await _start(state_dir)
    acked: dict[str, dict[str, Any]] = {}
    enough = trio.Event()

    async def writer(index: int) -> None:
        sequence = 0
        while True:
            name = f"w{index}-{sequence}"
            try:
                r = await client.post(
                    CM, json={"metadata": {"name": name}, "data": {"n": str(sequence)}}
                )
            except httpx.TransportError:
                return  # the server died under us: this write was never acknowledged
            assert r.status_code == 201, r.text
            acked[name] = r.json()
            if len(acked) >= 60:
                enough.set()
            sequence += 1

    counter = (await client.post(CM, json={"metadata": {"name": "counter"}})).json()
    updates = {"acked": 0, "sent": 0}

    async def updater() -> None:
        # conditional updates of one object race the kill too
        current = counter
        while True:
            updates["sent"] += 1
            current["data"] = {"n": str(updates["sent"])}
            try:
                r = await client.put(f"{CM}/counter", json=current)
            except httpx.TransportError:
                return
            assert r.status_code == 200, r.text
            current = r.json()
            updates["acked"] = updates["sent"]

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(updater)
            for index in range(4):
                nursery.start_soon(writer, index)
            with trio.fail_after(15):
                await enough.wait()
            process.send_signal(signal.SIGKILL)  # writes are in flight
            await process.wait()
    finally:
        await client.aclose()
    assert process.returncode == -signal.SIGKILL

    process, client = await _start(state_dir)
    try:
        listed = (await client.get(CM)).json()
        stored = {i["metadata"]["name"]: i for i in listed["items"]}
        for name, obj in acked.items():
            assert name in stored, f"acknowledged write {name} lost"
            assert stored[name]["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
            assert stored[name]["metadata"]["uid"] == obj["metadata"]["uid"]
            assert stored[name]["data"] == obj["data"]
        n = int(stored["counter"]["data"]["n"])
        assert updates["acked"] <= n <= updates["sent"]
        assert updates["acked"] > 0
        highest = max(int(o["metadata"]["resourceVersion"]) for o in stored.values())
        after = await client.post(CM, json={"metadata": {"name": "after-restart"}})
        assert int(after.json()["metadata"]["resourceVersion"]) > highest
        # a watcher resuming from before the crash gets 410 (history is not persisted)
        old_rv = min(int(o["metadata"]["resourceVersion"]) for o in acked.values())
        r = await client.get(
            CM, params={"watch": "true", "resourceVersion": str(old_rv), "timeoutSeconds": "1"}
        )
        first = r.text.splitlines()[0]
        assert '"type":"ERROR"' in first
        assert '"code":410' in first
    finally:
        await client.aclose()
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(5):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
