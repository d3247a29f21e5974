"""TLS wiring for Runtimes created in namespaces other than the install's (``krt dev up``).

Seed 000 (Runtime Gateway; Authentication and Authorization): the gateway reaches a
Runtime's runtimed over mutual TLS with workload identities, and issuing those certificates
is the installation's job. ``krt dev up`` is that installation on localkube. It creates the
runtimed wiring in ``default`` only (:mod:`krt.cli.dev_install`): the gateway CA ConfigMap
(``status.endpoint.caBundle``) and the peer TLS Secret. A Runtime created in another
namespace without these two objects got function Runs that showed Ready but could not be
invoked: its runtimed served plaintext (the gateway's mTLS dial failed, ``503
RuntimeUnreachable``) and it published no caBundle.

So the dev cluster process runs :func:`serve_runtime_namespaces` next to localkube. It
watches Runtimes in every namespace, and the first time one appears in a namespace that
lacks the objects, it creates them there:

* the ConfigMap ``kruntimes-gateway-ca`` (``ca.crt``: the dev gateway CA);
* the Secret ``kruntimes-peer-tls``, with a leaf of the dev peer CA for ``*.<ns>.svc``
  (:func:`krt.cli.dev_certs.namespace_peer_tls`).

Then it deletes that namespace's Runtime Pods that already exist. runtimed reads both files
once at start, so a Pod that started before the Secret existed would keep serving plaintext;
its ReplicaSet replaces it with a Pod that mounts the files. Objects that already exist are
never changed: a Secret the user made stays as it is. Nothing happens on a cluster whose
kruntimes was not installed by ``krt dev up`` (:func:`krt.cli.dev_certs.installed_cas`), or
in the install's own namespace, whose objects the install applies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Final

import trio

from krt.api.constants import RUNTIME_LABEL
from krt.cli.dev_apply import KIND_REFS
from krt.cli.dev_certs import installed_cas, namespace_peer_tls, tls_secret
from krt.cli.dev_install import GATEWAY_CA_CONFIGMAP, PEER_TLS_SECRET, RUNTIMES_NAMESPACE
from krt.kube.client import Kube
from krt.kube.errors import AlreadyExists, KubeError, NotFound
from krt.kube.informer import EventType, Informer, InformerEvent
from krt.kube.resources import PODS, RUNTIMES

__all__ = ["NamespaceWiring", "serve_runtime_namespaces"]

log = logging.getLogger(__name__)

#: Seconds between looks for the dev CAs on a cluster kruntimes is not installed on yet.
CA_POLL_SECONDS: Final = 2.0
#: Seconds before a namespace whose wiring failed (API error, unreadable CA) is tried again.
RETRY_SECONDS: Final = 2.0
_DEV_LABELS: Final = {"app.kubernetes.io/part-of": "kruntimes", "kruntimes.io/dev": "true"}


class NamespaceWiring:
    """Creates the gateway CA ConfigMap and peer TLS Secret in a Runtime's namespace.

    Args:
        kube: an admin client of the dev cluster.
        state_dir: the dev cluster's state directory (the CAs are under ``kruntimes/``).
        skip: namespaces left alone (the install's own Runtime namespace).
    """

    def __init__(
        self,
        kube: Kube,
        *,
        state_dir: Path,
        skip: frozenset[str] = frozenset({RUNTIMES_NAMESPACE}),
    ) -> None:
        self._kube = kube
        self._state_dir = state_dir
        self._skip = skip
        #: Namespaces found wired (or wired by us) since start.
        self.done: set[str] = set()

    async def _exists(self, kind: str, name: str, namespace: str) -> bool:
        try:
            await self._kube.get(KIND_REFS[kind], name, namespace)
        except NotFound:
            return False
        return True

    async def _create(self, kind: str, obj: dict[str, object]) -> bool:
        try:
            await self._kube.create(KIND_REFS[kind], obj)
        except AlreadyExists:
            return False
        return True

    async def wire(self, namespace: str) -> list[str]:
        """Create what ``namespace`` lacks, then restart its Runtime Pods if anything was new.

        Args:
            namespace: a namespace holding a Runtime.

        Returns:
            What was done, as ``kubectl`` words it (``secret/kruntimes-peer-tls created``,
            ``pod/<name> deleted``); empty when nothing was missing or wiring is not ours.

        Raises:
            KubeError: the API server refused or could not be reached.
            OSError: the dev CAs cannot be read.
        """
        if namespace in self._skip or namespace in self.done:
            return []
        if not await trio.to_thread.run_sync(installed_cas, self._state_dir):
            return []
        done: list[str] = []
        if not await self._exists("ConfigMap", GATEWAY_CA_CONFIGMAP, namespace):
            ca_file = self._state_dir / "kruntimes" / "gateway-ca" / "ca.crt"
            ca = await trio.to_thread.run_sync(ca_file.read_text)
            configmap: dict[str, object] = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": GATEWAY_CA_CONFIGMAP,
                    "namespace": namespace,
                    "labels": dict(_DEV_LABELS),
                },
                "data": {"ca.crt": ca},
            }
            if await self._create("ConfigMap", configmap):
                done.append(f"configmap/{GATEWAY_CA_CONFIGMAP} created")
        if not await self._exists("Secret", PEER_TLS_SECRET, namespace):
            pair = await trio.to_thread.run_sync(namespace_peer_tls, self._state_dir, namespace)
            if await self._create("Secret", tls_secret(PEER_TLS_SECRET, namespace, pair)):
                done.append(f"secret/{PEER_TLS_SECRET} created")
        if done:
            pods, _ = await self._kube.list(PODS, namespace, label_selector=RUNTIME_LABEL)
            for pod in pods:
                name = pod["metadata"]["name"]
                try:
                    await self._kube.delete(PODS, name, namespace)
                except NotFound:
                    continue
                done.append(f"pod/{name} deleted")
        self.done.add(namespace)
        return done


async def serve_runtime_namespaces(
    kube: Kube,
    *,
    state_dir: Path,
    progress: Callable[[str], None] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Wire every namespace that gets a Runtime (see the module docstring).

    Never returns unless cancelled; ``task_status.started()`` at once. Until ``krt dev up``
    has generated the dev CAs, it only looks for them every :data:`CA_POLL_SECONDS`
    seconds; then it watches Runtimes in every namespace (existing ones included). A
    namespace whose wiring fails on an API or file error is tried again after
    :data:`RETRY_SECONDS` seconds.

    Args:
        kube: an admin client of the dev cluster.
        state_dir: the dev cluster's state directory.
        progress: called with one line per object created or Pod restarted
            (``namespace team-a: secret/kruntimes-peer-tls created``); logged when omitted.
    """

    def say(line: str) -> None:
        if progress is not None:
            progress(line)
        else:
            log.info("%s", line)

    wiring = NamespaceWiring(kube, state_dir=state_dir)
    informer = Informer(kube, RUNTIMES)
    send, receive = trio.open_memory_channel[str](float("inf"))

    def on_runtime(event: InformerEvent) -> None:
        namespace = str((event.obj.get("metadata") or {}).get("namespace") or "")
        if not namespace:
            return
        if event.type is EventType.DELETED:
            # the namespace may go and come back under the same name: look again then
            if not any(
                (obj.get("metadata") or {}).get("namespace") == namespace
                for obj in informer.items()
            ):
                wiring.done.discard(namespace)
        elif namespace not in wiring.done:
            send.send_nowait(namespace)

    informer.add_handler(on_runtime)

    async def retry_later(namespace: str) -> None:
        await trio.sleep(RETRY_SECONDS)
        send.send_nowait(namespace)

    task_status.started()
    # a bare cluster (--no-install) has neither CAs nor the Runtime CRD: watch from the
    # moment krt dev up installed kruntimes, so the informer does not retry a 404 meanwhile
    while not await trio.to_thread.run_sync(installed_cas, state_dir):  # noqa: ASYNC110 - files
        await trio.sleep(CA_POLL_SECONDS)
    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        async for namespace in receive:
            try:
                for line in await wiring.wire(namespace):
                    say(f"namespace {namespace}: {line}")
            except ValueError as exc:  # not a name a certificate can carry: never will be
                log.warning("namespace %s: no runtimed TLS wiring: %s", namespace, exc)
                wiring.done.add(namespace)
            except (KubeError, OSError) as exc:
                log.warning("namespace %s: runtimed TLS wiring failed: %s", namespace, exc)
                nursery.start_soon(retry_later, namespace)
