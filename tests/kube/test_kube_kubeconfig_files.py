"""Unusable kubeconfig files are named and explained before kr8s reads them (finding F6).

Each shape below used to reach kr8s's loader and end as a Python traceback (exit 1).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from krt.kube.client import ConfigError, connect
from krt.kube.kubeconfig_files import (
    kubeconfig_problem,
    loader_problem,
    missing_kubeconfig_problem,
)
from localkube.apiserver import ApiServerHandle

GOOD = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "x",
}


def write(tmp_path: Path, text: str, name: str = "kc") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def with_changes(**changes: object) -> str:
    config = dict(GOOD)
    for key, value in changes.items():
        key = key.replace("_", "-")
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return yaml.safe_dump(config)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("garbage: [\n", "invalid YAML (line 2, column 1): expected the node content"),
        ("[]\n", "not a kubeconfig (a YAML list where a mapping"),
        ("just a string\n", "not a kubeconfig (a YAML string where"),
        ("", "is empty"),
        ("apiVersion: v1\nclusters: []\n", "no current-context is set and no context is defined"),
        (with_changes(current_context=None), "no current-context is set (pass --context NAME; "),
        (with_changes(current_context="gone"), "current-context 'gone' names no context"),
        (with_changes(contexts={"x": 1}), "contexts must be a list, not a dict"),
        (with_changes(users=["u"]), "users[0] is not a mapping with a name"),
        (
            with_changes(contexts=[{"name": "x", "context": {"cluster": "nope", "user": "u"}}]),
            "context 'x' names cluster 'nope', which is not defined",
        ),
        (
            with_changes(contexts=[{"name": "x", "context": {"cluster": "c", "user": "nope"}}]),
            "context 'x' names user 'nope', which is not defined",
        ),
        (with_changes(clusters=[{"name": "c", "cluster": {}}]), "cluster 'c' has no server"),
        (with_changes(contexts=[{"name": "x"}]), "context 'x' has no 'context' mapping"),
    ],
)
def test_each_shape_names_the_file_and_the_problem(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    problem = kubeconfig_problem([path], context=None)
    assert problem is not None
    assert problem.startswith(str(path))
    assert expected in problem
    assert "\n" not in problem


def test_a_usable_file_has_no_problem(tmp_path: Path) -> None:
    assert kubeconfig_problem([write(tmp_path, yaml.safe_dump(GOOD))], context=None) is None
    # kr8s takes the first context when current-context is empty
    empty_current = write(tmp_path, with_changes(current_context=""), "kc2")
    assert kubeconfig_problem([empty_current], context=None) is None


def test_context_flag_and_merged_files(tmp_path: Path) -> None:
    first = write(tmp_path, with_changes(current_context=None), "a")
    assert kubeconfig_problem([first], context="x") is None
    problem = kubeconfig_problem([first], context="y")
    assert problem == f"{first}: no context 'y' (contexts: x)"
    # a user defined in the second file of $KUBECONFIG serves a context of the first
    no_users = write(tmp_path, with_changes(users=None), "b")
    users = write(tmp_path, yaml.safe_dump({"users": GOOD["users"]}), "c")
    assert kubeconfig_problem([no_users, users], context=None) is None
    assert "user 'u', which is not defined" in str(kubeconfig_problem([no_users], context=None))


def test_unreadable_and_directory(tmp_path: Path) -> None:
    assert kubeconfig_problem([tmp_path], context=None) == (
        f"{tmp_path} is a directory, not a kubeconfig file"
    )
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe\x00")
    assert "cannot read it" in str(kubeconfig_problem([binary], context=None))


def test_missing_kubeconfig_names_the_files_from_the_environment() -> None:
    assert missing_kubeconfig_problem("/nonexistent", [Path("/nonexistent")]) == (
        "KUBECONFIG names /nonexistent, which does not exist"
    )
    assert missing_kubeconfig_problem("/a:/b", [Path("/a"), Path("/b")]) == (
        "KUBECONFIG names /a, /b, which do not exist"
    )
    assert "set KUBECONFIG" in missing_kubeconfig_problem("", [Path("/h/.kube/config")])


def test_loader_problem_words() -> None:
    assert loader_problem(KeyError("user")) == "missing key 'user'"
    assert loader_problem(TypeError("list indices must be integers")) == (
        "unexpected structure (list indices must be integers)"
    )
    with pytest.raises(yaml.YAMLError) as caught:
        yaml.safe_load("a: [")
    assert loader_problem(caught.value).startswith("invalid YAML (line 1, column 5): ")


async def test_connect_raises_config_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "garbage: [\n")
    with pytest.raises(ConfigError, match=r"kc: invalid YAML \(line 2, column 1\)"):
        await connect(kubeconfig=path)


async def test_what_kr8s_still_rejects_is_a_config_error_not_a_traceback(
    tmp_path: Path, apiserver: ApiServerHandle
) -> None:
    """A users entry without ``user`` passes the checks; kr8s's KeyError is worded."""
    config = yaml.safe_load(apiserver.kubeconfig_path.read_text())
    for user in config["users"]:
        user.pop("user")
    path = write(tmp_path, yaml.safe_dump(config))
    with pytest.raises(ConfigError) as caught:
        await connect(kubeconfig=path)
    assert str(caught.value) == f"{path}: cannot load it: missing key 'user'"
