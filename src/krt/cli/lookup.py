"""Reading Runs and Runtimes (and creating Runs) with messages that say what is wrong.

A 404 on a Run can mean the Run does not exist or that kruntimes' CRDs are not installed
(the whole ``runs.kruntimes.io`` API is missing); the message tells the two apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from krt.cli.exitcodes import ExitCode
from krt.cli.failures import CommandFailed, describe_api_error, one_line
from krt.kube.errors import AlreadyExists, ApiError, NotFound
from krt.kube.resources import RUNS, RUNTIMES, ResourceRef

if TYPE_CHECKING:
    from krt.kube.client import Kube  # kr8s is imported only when a command connects

Obj = dict[str, Any]


def not_installed(ref: ResourceRef) -> CommandFailed:
    """The failure for a cluster without the kruntimes CRDs."""
    return CommandFailed(
        ExitCode.NOT_FOUND,
        f"the cluster does not serve {ref.plural}.{ref.group}: kruntimes is not installed "
        "(for a local cluster: krt dev up)",
    )


def missing(exc: NotFound, ref: ResourceRef, name: str, namespace: str) -> CommandFailed:
    """The failure for a 404 on the object ``name`` (exit 3).

    Args:
        exc: the API server's 404 for a GET, PATCH or DELETE of ``name``.
        ref: the resource (Runs or Runtimes).
        name: the object's name.
        namespace: where it was looked for (named in the message).

    Returns:
        ``Run "x" not found in namespace "ns" (see krt list -n ns)``, or
        :func:`not_installed` when the 404 is about the whole resource type (it names no
        object): the CRDs are missing.
    """
    if exc.details.get("name") != name:
        return not_installed(ref)
    hint = "krt list" if ref == RUNS else "krt runtime list"
    return CommandFailed(
        ExitCode.NOT_FOUND,
        f'{ref.kind} "{name}" not found in namespace "{namespace}" (see {hint} -n {namespace})',
    )


async def get_object(kube: Kube, ref: ResourceRef, name: str, namespace: str) -> Obj:
    """GET a Run or Runtime; a 404 becomes a :class:`CommandFailed` (exit 3).

    Raises:
        CommandFailed: not found, or kruntimes not installed.
        ApiError, ConnectionFailed: other failures.
    """
    try:
        return await kube.get(ref, name, namespace)
    except NotFound as exc:
        raise missing(exc, ref, name, namespace) from exc


async def get_objects(
    kube: Kube, ref: ResourceRef, names: Sequence[str], namespace: str
) -> tuple[list[Obj], list[CommandFailed]]:
    """GET every named Run or Runtime, going on past the missing ones (as kubectl does).

    ``kubectl get pod a b`` prints the Pods that exist and reports each missing name; so
    does ``krt get a b``. Only a name's own 404 is collected: any other failure concerns
    every name alike (kruntimes not installed, RBAC, connection) and is raised.

    Args:
        kube: the client.
        ref: the resource (Runs or Runtimes).
        names: object names in the order given; a repeated name is fetched once.
        namespace: where to look.

    Returns:
        The objects found (in ``names`` order) and one exit-3 failure per missing name.

    Raises:
        CommandFailed: kruntimes not installed (exit 3).
        ApiError, ConnectionFailed: other failures.
    """
    found: list[Obj] = []
    failures: list[CommandFailed] = []
    for name in dict.fromkeys(names):
        try:
            found.append(await kube.get(ref, name, namespace))
        except NotFound as exc:
            if exc.details.get("name") != name:
                raise not_installed(ref) from exc
            failures.append(missing(exc, ref, name, namespace))
    return found, failures


async def list_objects(
    kube: Kube, ref: ResourceRef, namespace: str | None, selector: str = ""
) -> list[Obj]:
    """LIST Runs or Runtimes (``namespace`` None: all namespaces), sorted by namespace/name.

    Raises:
        CommandFailed: kruntimes not installed.
    """
    try:
        items, _ = await kube.list(ref, namespace, label_selector=selector)
    except NotFound as exc:
        raise not_installed(ref) from exc
    return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))


def now() -> datetime:
    """The wall clock (UTC), for ages in tables."""
    return datetime.now(UTC)


async def check_runtime(kube: Kube, name: str, namespace: str) -> None:
    """Fail early when the Runtime a new Run names does not exist (a usual mistake).

    A Run for a missing Runtime would be accepted and stay Pending (``RuntimeNotFound``);
    saying so before creating it, with the Runtimes that do exist, saves the wait. When the
    caller may not read Runtimes (403), the check is skipped.

    Raises:
        CommandFailed: exit 3, naming the Runtimes of the namespace.
    """
    try:
        await kube.get(RUNTIMES, name, namespace)
        return
    except NotFound as exc:
        if exc.details.get("name") != name:
            raise not_installed(RUNTIMES) from exc
    except ApiError as exc:
        if exc.code == 403:
            return
        raise
    try:
        items, _ = await kube.list(RUNTIMES, namespace)
        known = ", ".join(sorted(o["metadata"]["name"] for o in items)) or "none"
    except ApiError:
        known = "unknown"
    raise CommandFailed(
        ExitCode.NOT_FOUND,
        f'Runtime "{name}" not found in namespace "{namespace}" (Runtimes there: {known})',
    )


async def create_run(kube: Kube, manifest: Obj, *, what: str) -> Obj:
    """Create a Run after checking that its Runtime exists (``krt run``, ``krt function``).

    Args:
        kube: the client; the Run goes to ``kube.namespace``.
        manifest: the Run (:mod:`krt.cli.manifests`); ``spec.runtime`` is checked first.
        what: what is being done, for the error message (``"creating function f1"``).

    Returns:
        The created Run as the API server returned it (with its generated name).

    Raises:
        CommandFailed: the Runtime does not exist (exit 3, see :func:`check_runtime`), or
            the API server refused the Run (e.g. the CRD's validation, with the field).
    """
    await check_runtime(kube, str(manifest["spec"]["runtime"]), kube.namespace)
    try:
        return await kube.create(RUNS, manifest)
    except AlreadyExists as exc:
        # Say how to get past it: a function is addressed by its name, so it needs one; a
        # task may let the API server generate one.
        name = str(manifest["metadata"].get("name") or "")
        advice = f"choose another name, or delete the old Run first: krt delete {name}"
        if "task" in (manifest["spec"].get("mode") or {}):
            advice += ", or omit NAME to generate one"
        message = one_line(exc.message or str(exc))
        raise CommandFailed(ExitCode.CONFLICT, f"{what}: {message} ({advice})") from exc
    except ApiError as exc:
        raise describe_api_error(exc, what) from exc
