"""Structured logs (JSON lines keyed by Run UID and invocation ID) and the INTERNAL fallback."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import purerpc
import pytest

from krt import logs
from krt.proto.executor.v1 import runtime_pb2 as pb
from servers.common.cli import LOG_FLOORS, LOGGERS
from servers.common.errors import Code, ContractError
from servers.common.servicers import RuntimeServicer, rpc_error


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    logs.configure(loggers=LOGGERS, floors=LOG_FLOORS, line_format=logs.EPOCH_LINES, stream=stream)
    yield stream
    for name in (*LOGGERS, *LOG_FLOORS):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)


def test_records_are_json_lines_with_their_fields(captured: io.StringIO) -> None:
    logging.getLogger("servers.python").info(
        "printed by the handler",
        extra={"run_uid": "run-1", "invocation_id": "inv-1", "stream": "stdout"},
    )
    logging.getLogger("servers.app").debug("not at info level")
    (line,) = captured.getvalue().splitlines()
    record = json.loads(line)
    assert record["msg"] == "printed by the handler"
    assert record["level"] == "info"
    assert record["logger"] == "servers.python"
    assert (record["run_uid"], record["invocation_id"], record["stream"]) == (
        "run-1",
        "inv-1",
        "stdout",
    )
    assert isinstance(record["ts"], float)


def test_exceptions_are_included(captured: io.StringIO) -> None:
    try:
        raise RuntimeError("kaput")
    except RuntimeError:
        logging.getLogger("servers.rpc").exception("internal error")
    record = json.loads(captured.getvalue())
    assert "RuntimeError: kaput" in record["exc"]


def test_purerpc_warnings_are_quiet_errors_are_kept(captured: io.StringIO) -> None:
    logging.getLogger("purerpc.server").warning("Got exception in main dispatch loop")
    assert captured.getvalue() == ""
    logging.getLogger("purerpc.server").error("real trouble")
    assert json.loads(captured.getvalue())["msg"] == "real trouble"


def test_contract_errors_map_to_the_same_grpc_status() -> None:
    error = rpc_error(ContractError(Code.RESOURCE_EXHAUSTED, "one in flight"))
    assert error.status.status_code == purerpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.status.status_message == "one in flight"
    for code in Code:
        assert rpc_error(ContractError(code, "x")).status.status_code.name == code.name


class _Broken:
    def status(self, exec_id: str) -> None:
        raise KeyError("bug")


async def test_unexpected_exceptions_are_internal_not_cancelled() -> None:
    servicer = RuntimeServicer(_Broken(), adapter_name="python")  # type: ignore[arg-type]
    with pytest.raises(purerpc.RpcFailedError) as excinfo:
        await servicer.Status(pb.StatusRequest(id="x"))
    assert excinfo.value.status.status_code == purerpc.StatusCode.INTERNAL
    assert "KeyError" in excinfo.value.status.status_message


def test_grpc_connection_handler_lines_are_routed(captured: io.StringIO) -> None:
    """The gRPC handler (krt.grpc.server) logs for the Runtime Server, as servers.* did."""
    logging.getLogger("krt.grpc.server").info("connection dropped")
    assert json.loads(captured.getvalue())["logger"] == "krt.grpc.server"


def test_unknown_level_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        logs.configure(level="loud", loggers=("servers.test-unused",))
