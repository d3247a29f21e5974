"""A Run's logs: the container logs of its Pod, filtered by the Run's UID.

runtimed writes JSON lines (:mod:`krt.logs`); every record about a Run carries
``run_uid`` and ``attempt``, and a task's stdout/stderr lines carry ``stream`` too (issue 6:
output goes to logs, never to ``Run.status``). ``krt logs`` reads
``pods/{assignedPod}/log?container=runtimed`` and prints the Run's output lines (stdout lines
to stdout, stderr lines to stderr); ``--runtimed`` adds runtimed's own records about the Run.

A function's handler runs in the Runtime Server, not in runtimed: what it prints is logged by
the server (seed 002, "Invocation Semantics": records keyed by ``run_uid`` and
``invocation_id``, with ``stream``) in the Pod's other container(s), in the servers' key
spelling (``ts``/``msg``, :data:`krt.logs.EPOCH_LINES`). For a function Run ``krt logs`` reads
those containers too and merges the lines by time, so "the handler raised; see krt logs"
leads to what the handler printed.

Following (``-f``, ``krt run --follow``) streams the log of the Pod the Run is assigned to,
switches Pods when a retry moves the Run, re-opens a container's log when it restarts (a
runtimed crash ends the followed log; the new instance goes on logging), and stops once the
Run is terminal and the log has been quiet for :data:`SETTLE_SECONDS`.

A restarted runtimed logs the attempt's kept output again, from its beginning. Each task
output record carries ``offset``, where the line starts in the attempt's stream
(:mod:`runtimed.output_log`): :class:`SeenLines` shows a line of a stream once per offset,
and any other record once (by its time, when a log that was read already is read again).
Output records without ``offset`` (an older runtimed) print as before.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx
import trio

from krt.api.phases import is_terminal, phase_of
from krt.kube.errors import ApiError, ConnectionFailed, error_from_status
from krt.kube.http11_errors import describe_failure
from krt.kube.resources import PODS

if TYPE_CHECKING:
    from krt.kube.client import Kube  # kr8s is imported only when a command connects

#: The container runtimed runs in (``krt.api.naming.RUNTIMED_CONTAINER_NAME``).
RUNTIMED_CONTAINER = "runtimed"
#: After the Run is terminal, stop following once no line came for this many seconds.
SETTLE_SECONDS = 2.0
#: Seconds before a container's ended log is re-opened while the Run runs (doubling while
#: it yields nothing new: a container waiting out its restart backoff serves its old log).
REOPEN_SECONDS = 0.5
#: The longest pause between re-opens of an ended log (seconds).
REOPEN_MAX_SECONDS = 4.0


@dataclass(frozen=True)
class LogLine:
    """One line of a Run's log.

    Attributes:
        text: the line to print.
        stream: ``stdout`` or ``stderr`` for task output, ``runtimed`` for a runtimed record.
        attempt: the attempt it belongs to (0 when unknown).
    """

    text: str
    stream: str
    attempt: int = 0
    time: float = 0.0
    """When it was logged (epoch seconds; 0 when the record has no readable time)."""
    offset: int | None = None
    """Task output: where the line starts in its attempt's stream (characters; None when
    the record does not say)."""


class SeenLines:
    """The records of one Run already shown, so a re-logged or re-read one shows once.

    A task output line with an offset is new when it starts past every line of its attempt
    and stream shown so far (one runtimed instance logs a stream in order; a restarted one
    starts again from the beginning, at the same offsets). Any other record is new when it
    is later than every record shown from its container log (a container instance logs in
    time order, the next instance later): a log read again after it ended (the container
    waiting out its restart backoff serves its last instance) shows nothing twice. Records
    with the same time are told apart by their text. Memory stays small however long the
    Run is followed: one number per stream and attempt, one time per container.
    """

    def __init__(self) -> None:
        self._last_offset: dict[tuple[int, str], int] = {}
        # per container log: the latest record time shown, and the records shown at it
        self._last_time: dict[str, tuple[float, set[str]]] = {}

    def first_time(self, raw: str, line: LogLine, source: str) -> bool:
        """Whether ``line`` (parsed from the log line ``raw``) is shown for the first time.

        Records it as shown.

        Args:
            raw: the log line.
            line: what :func:`parse_line` made of it.
            source: the log it came from (``POD/CONTAINER``).
        """
        if line.offset is not None:
            key = (line.attempt, line.stream)
            if line.offset <= self._last_offset.get(key, -1):
                return False
            self._last_offset[key] = line.offset
            return True
        if not line.time:
            return True  # no readable time: nothing to compare, show it
        last = self._last_time.get(source)
        if last is None or line.time > last[0]:
            self._last_time[source] = (line.time, {raw})
            return True
        if line.time < last[0] or raw in last[1]:
            return False
        last[1].add(raw)
        return True


def parse_line(raw: str, run_uid: str, *, source: str = RUNTIMED_CONTAINER) -> LogLine | None:
    """Pick a log line about ``run_uid`` apart; None for other lines.

    Reads both key spellings of :mod:`krt.logs`: runtimed's (``time`` RFC 3339,
    ``message``) and the Runtime Servers' (``ts`` epoch seconds, ``msg``).

    Args:
        raw: one line of the container log (a JSON object; anything else is skipped).
        run_uid: the Run's ``metadata.uid``.
        source: the container it came from; names a record that is not output
            (``[runtimed info] ...``, ``[runtime info] ...``).
    """
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("run_uid") != run_uid:
        return None
    attempt = record.get("attempt")
    attempt = attempt if isinstance(attempt, int) else 0
    message = str(record.get("message", record.get("msg", "")))
    when, when_text = _record_time(record)
    stream = record.get("stream")
    if stream in ("stdout", "stderr"):
        offset = record.get("offset")
        if not isinstance(offset, int) or isinstance(offset, bool):
            offset = None
        return LogLine(message, str(stream), attempt, when, offset)
    if record.get("error"):
        message = f"{message}: {record['error']}"
    level = str(record.get("level", "info"))
    return LogLine(f"[{source} {level}] {when_text} {message}".rstrip(), "runtimed", attempt, when)


def _record_time(record: dict[str, Any]) -> tuple[float, str]:
    """``(epoch seconds, text)`` of a record's ``time`` (RFC 3339) or ``ts`` (epoch)."""
    text = record.get("time")
    if isinstance(text, str):
        try:
            return datetime.fromisoformat(text).timestamp(), text
        except ValueError:
            return 0.0, text
    stamp = record.get("ts")
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        moment = datetime.fromtimestamp(stamp, UTC)
        return float(stamp), moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return 0.0, ""


def is_function(run: dict[str, Any]) -> bool:
    """True for a function Run (``spec.mode.function``)."""
    return "function" in ((run.get("spec") or {}).get("mode") or {})


async def log_containers(kube: Kube, run: dict[str, Any], pod: str) -> list[str]:
    """The containers of ``pod`` whose logs hold the Run's lines, runtimed first.

    A task's output is logged by runtimed alone. A function's handler output is logged by
    the Runtime Server, so for a function every container of the Pod is read (the built-in
    Runtimes name it ``runtime``; a custom Runtime may name it otherwise).

    Raises:
        NotFound: the Pod is gone. ApiError, ConnectionFailed: other failures.
    """
    if not is_function(run):
        return [RUNTIMED_CONTAINER]
    obj = await kube.get(PODS, pod, run["metadata"]["namespace"])
    names = [
        str(c.get("name"))
        for c in (obj.get("spec") or {}).get("containers") or []
        if c.get("name") and c.get("name") != RUNTIMED_CONTAINER
    ]
    return [RUNTIMED_CONTAINER, *names]


async def pod_log_lines(
    kube: Kube,
    namespace: str,
    pod: str,
    *,
    follow: bool,
    container: str = RUNTIMED_CONTAINER,
    previous: bool = False,
) -> AsyncGenerator[str, None]:
    """Yield the lines of a container's log (``GET pods/{pod}/log``).

    Args:
        kube: a connected client.
        namespace: the Pod's namespace.
        pod: the Pod name.
        follow: keep streaming new lines (until the caller stops or the Pod ends).
        container: the container.
        previous: read the container's previous instance (the one before its last
            restart), as ``kubectl logs --previous``.

    Raises:
        NotFound: the Pod is gone. BadRequest: the container has not started.
        ApiError, ConnectionFailed: other failures.
    """
    namespace_part, url = PODS.url_parts(namespace, pod, "log")
    params = {"container": container}
    if follow:
        params["follow"] = "true"
    if previous:
        params["previous"] = "true"
    try:
        # krt.kube has no streaming text verb (Kube.request decodes JSON); the log is read
        # through the same kr8s session Kube wraps, with Kube's error mapping.
        async with kube.api.call_api(
            "GET",
            version=PODS.api_version,
            base=PODS.base,
            namespace=namespace_part,
            url=url,
            params=params,
            raise_for_status=False,
            stream=True,
        ) as response:
            if response.status_code >= 400:
                body = await response.aread()
                try:
                    decoded: object = json.loads(body)
                except ValueError:
                    decoded = body.decode(errors="replace")
                raise error_from_status(response.status_code, decoded)
            async for line in response.aiter_lines():
                yield line
    except (httpx.TransportError, OSError) as exc:
        raise ConnectionFailed(f"log of pod {namespace}/{pod}: {_transport_words(exc)}") from exc


def _transport_words(exc: BaseException) -> str:
    """Why a log request failed, in words: the first ``OSError`` under httpx's wrappers.

    httpcore raises its errors *during* handling of the socket's (``__context__``, not
    ``__cause__``), so the chain is walked both ways before wording it.
    """
    current: BaseException | None = exc
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError):
            return describe_failure(current)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return describe_failure(exc)


async def run_log_lines(
    kube: Kube,
    namespace: str,
    pod: str,
    run_uid: str,
    *,
    follow: bool,
    container: str = RUNTIMED_CONTAINER,
    previous: bool = False,
    seen: SeenLines | None = None,
) -> AsyncGenerator[LogLine, None]:
    """The lines of ``pod``'s ``container`` log that belong to the Run ``run_uid``.

    ``previous`` reads the container's instance before its last restart (see
    :func:`pod_log_lines`). With ``seen``, lines shown already are skipped (and the others
    recorded there).
    """
    async with aclosing(
        pod_log_lines(kube, namespace, pod, follow=follow, container=container, previous=previous)
    ) as lines:
        async for raw in lines:
            parsed = parse_line(raw, run_uid, source=container)
            if parsed is not None and (
                seen is None or seen.first_time(raw, parsed, f"{pod}/{container}")
            ):
                yield parsed


async def follow_run_logs(
    kube: Kube,
    run: dict[str, Any],
    emit: Callable[[LogLine], None],
    *,
    settle_seconds: float = SETTLE_SECONDS,
) -> dict[str, Any]:
    """Stream a Run's log lines to ``emit`` until it is terminal and its log is quiet.

    Args:
        kube: a connected client.
        run: the Run as last read.
        emit: called with each line, in order per Pod.
        settle_seconds: quiet time after the Run became terminal before returning.

    Returns:
        The terminal Run.

    Raises:
        RunDeleted: the Run was deleted meanwhile. ApiError, ConnectionFailed: as usual.
    """
    from krt.cli.waiting import follow_run  # the watch loop lives there

    meta = run["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    final: dict[str, Any] | None = None
    ended = trio.Event()  # set with ``final``: wakes streams waiting to re-open a log
    # Once the Run is terminal, this scope's deadline is "settle_seconds after the last line".
    settle = trio.CancelScope()
    seen = SeenLines()

    def on_line(line: LogLine) -> None:
        if final is not None:
            settle.deadline = trio.current_time() + settle_seconds
        emit(line)

    async def stream(
        pod: str,
        container: str,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        pause = REOPEN_SECONDS
        while True:
            # a read opened after the Run ended has all there is: when it ends, so do we
            last_read = final is not None
            fresh = False
            try:
                async with aclosing(
                    run_log_lines(
                        kube, namespace, pod, uid, follow=True, container=container, seen=seen
                    )
                ) as lines:
                    async for line in lines:
                        fresh = True
                        on_line(line)
                # The log ended: this instance of the container stopped. If the Run still
                # runs, its next instance (a restarted runtimed) logs the rest: re-open.
                if last_read:
                    return
                pause = REOPEN_SECONDS if fresh else min(REOPEN_MAX_SECONDS, 2 * pause)
                wait = pause
            except ConnectionFailed:
                await trio.sleep(1.0)  # until the settle time is over, if the Run ended
                continue
            except ApiError:  # container not started yet, or the Pod is gone
                if last_read:
                    return
                wait = REOPEN_SECONDS
            with trio.move_on_after(wait):
                await ended.wait()

    async with trio.open_nursery() as nursery:
        followed: set[str] = set()
        async with aclosing(follow_run(kube, namespace, name)) as versions:
            async for obj in versions:
                pod = (obj.get("status") or {}).get("assignedPod")
                if pod and pod not in followed:
                    followed.add(pod)
                    try:
                        containers = await log_containers(kube, obj, pod)
                    except (ApiError, ConnectionFailed):
                        containers = [RUNTIMED_CONTAINER]  # the Pod is gone: runtimed only
                    for container in containers:
                        await nursery.start(stream, pod, container)
                if is_terminal(phase_of((obj.get("status") or {}).get("phase"))):
                    final = obj
                    ended.set()
                    break
        if followed:  # no Pod ever ran it (e.g. cancelled while Pending): nothing to drain
            settle.deadline = trio.current_time() + settle_seconds
            with settle:
                await trio.sleep_forever()
        nursery.cancel_scope.cancel()
    assert final is not None
    return final
