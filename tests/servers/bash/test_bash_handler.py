"""The Bash handler shape ``file.function`` (seed 002, "Built-in Runtime Requirements")."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from servers.bash.handler import MAX_HANDLER_BYTES, BashHandler, handler_error, parse_handler


@pytest.mark.parametrize(
    ("handler", "script", "function"),
    [
        ("greet.hello", "greet.sh", "hello"),
        ("lib/greet.hello", "lib/greet.sh", "hello"),
        ("my.tools.run", "my.tools.sh", "run"),
        ("./greet._private2", "./greet.sh", "_private2"),
        ("dir with space/h.F", "dir with space/h.sh", "F"),
    ],
)
def test_valid_handlers_split_at_the_last_dot(handler: str, script: str, function: str) -> None:
    assert parse_handler(handler) == BashHandler(PurePosixPath(script), function)
    assert handler_error(handler) is None


@pytest.mark.parametrize(
    ("handler", "reason"),
    [
        ("", "empty"),
        ("greet", "no '.'"),
        ("greet.", "not a valid bash function name"),
        ("greet.2fast", "not a valid bash function name"),
        ("greet.-n", "not a valid bash function name"),
        ("greet.a-b", "not a valid bash function name"),
        ("greet.a b", "not a valid bash function name"),
        ("greet.$(id)", "not a valid bash function name"),
        (".hello", "empty file part"),
        ("/etc/greet.hello", "relative"),
        ("../greet.hello", "'..'"),
        ("lib/../../greet.hello", "'..'"),
        ("lib//greet.hello", "empty path component"),
        ("lib/.hello", "empty path component"),
        ("gr\neet.hello", "control character"),
        ("gr\x00eet.hello", "control character"),
        ("g" * MAX_HANDLER_BYTES + ".f", "limit is 1024 bytes"),
    ],
)
def test_malformed_handlers_are_rejected_with_the_reason(handler: str, reason: str) -> None:
    error = handler_error(handler)
    assert error is not None
    assert reason in error


def test_handler_at_the_size_limit_is_accepted() -> None:
    handler = "g" * (MAX_HANDLER_BYTES - 2) + ".f"
    assert handler_error(handler) is None
