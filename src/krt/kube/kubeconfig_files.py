"""Why a kubeconfig cannot be used, in one line that names the file (before kr8s reads it).

kr8s loads kubeconfig files trustingly: a file that is not YAML, not a mapping, or lacks
``current-context`` (or names a context, cluster or user that is not there) surfaces as a
``yaml.YAMLError``, ``TypeError``, ``KeyError`` or ``IndexError`` from deep inside its
loader, which a command would print as a traceback. :func:`kubeconfig_problem` checks the
files the way kr8s will read them (the first file's ``current-context``, contexts, clusters
and users merged in order) and says what is wrong, e.g. ``bad.kc: invalid YAML (line 2,
column 1): expected the node content, but found '<stream end>'``;
:func:`loader_problem` words anything kr8s still raises. kubectl reports the same cases
as ``error loading config file "bad.kc": ...``.

Written here rather than delegated: kr8s has no validation entry point, and kubectl's
rules fit in a page. Reading a kubeconfig twice costs well under a millisecond.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = ["kubeconfig_problem", "loader_problem", "missing_kubeconfig_problem"]

_LISTS = ("clusters", "contexts", "users")
#: How many names a message lists before "...".
_MAX_NAMES = 5


def kubeconfig_problem(paths: Sequence[Path], *, context: str | None) -> str | None:
    """What makes these kubeconfig files unusable, or None when kr8s can load them.

    Args:
        paths: the files, in ``$KUBECONFIG`` order (the first one's ``current-context``
            counts, as in kr8s and kubectl).
        context: ``--context``, or None for the current context.

    Returns:
        One line naming the file and the problem (unreadable, invalid YAML with line and
        column, empty, not a mapping, malformed lists, no or unknown current context, a
        context naming a missing cluster or user, a cluster without ``server``), or None.
    """
    configs: list[tuple[Path, Mapping[str, Any]]] = []
    for path in paths:
        loaded = _load(path)
        if isinstance(loaded, str):
            return loaded
        configs.append((path, loaded))
    if not configs:
        return None
    entries: dict[str, dict[str, tuple[Path, Mapping[str, Any]]]] = {k: {} for k in _LISTS}
    for path, config in configs:
        for key in _LISTS:
            for index, item in enumerate(config.get(key) or ()):
                if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                    return f"{path}: {key}[{index}] is not a mapping with a name"
                entries[key].setdefault(item["name"], (path, item))
    first, first_config = configs[0]
    files = ", ".join(str(path) for path, _ in configs)
    contexts = entries["contexts"]
    if context is None:
        if "current-context" not in first_config:
            return f"{first}: no current-context is set{_choose_hint(contexts)}"
        current = first_config.get("current-context") or ""
        if not isinstance(current, str):
            return f"{first}: current-context must be a context name"
        if not current:  # kr8s then takes the first context
            if not contexts:
                return f"{files}: no contexts"
            current = next(iter(contexts))
        if current not in contexts:
            return f"{first}: current-context {current!r} names no context ({_names(contexts)})"
    else:
        current = context
        if current not in contexts:
            return f"{files}: no context {current!r} ({_names(contexts)})"
    return _context_problem(current, contexts[current], entries)


def _load(path: Path) -> Mapping[str, Any] | str:
    """The parsed file, or the one-line problem with it."""
    try:
        text = path.read_text(encoding="utf-8")
    except IsADirectoryError:
        return f"{path} is a directory, not a kubeconfig file"
    except FileNotFoundError:
        return f"{path} does not exist"
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return f"{path}: cannot read it ({reason})"
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return f"{path}: invalid YAML{_yaml_where(exc)}"
    if loaded is None:
        return f"{path} is empty"
    if not isinstance(loaded, Mapping):
        return (
            f"{path}: not a kubeconfig (a YAML {_kind(loaded)} where a mapping with clusters, "
            "contexts and users was expected)"
        )
    for key in _LISTS:
        if key in loaded and not isinstance(loaded[key], list | None):
            return f"{path}: {key} must be a list, not a {_kind(loaded[key])}"
    return loaded


def _context_problem(
    name: str,
    found: tuple[Path, Mapping[str, Any]],
    entries: Mapping[str, Mapping[str, tuple[Path, Mapping[str, Any]]]],
) -> str | None:
    path, item = found
    body = item.get("context")
    if not isinstance(body, Mapping):
        return f"{path}: context {name!r} has no 'context' mapping"
    cluster = body.get("cluster")
    if not cluster:  # kr8s: no cluster means in-cluster ServiceAccount credentials
        return None
    if cluster not in entries["clusters"]:
        return f"{path}: context {name!r} names cluster {cluster!r}, which is not defined"
    cluster_path, cluster_item = entries["clusters"][cluster]
    cluster_body = cluster_item.get("cluster")
    if not isinstance(cluster_body, Mapping) or not cluster_body.get("server"):
        return f"{cluster_path}: cluster {cluster!r} has no server"
    if "user" not in body:
        return f"{path}: context {name!r} names no user"
    user = body.get("user")
    if user not in entries["users"]:
        return f"{path}: context {name!r} names user {user!r}, which is not defined"
    return None


def _choose_hint(contexts: Mapping[str, Any]) -> str:
    if not contexts:
        return " and no context is defined"
    return f" (pass --context NAME; {_names(contexts)})"


def _names(contexts: Mapping[str, Any]) -> str:
    if not contexts:
        return "there are no contexts"
    names = list(contexts)
    shown = ", ".join(names[:_MAX_NAMES]) + (", ..." if len(names) > _MAX_NAMES else "")
    return f"contexts: {shown}"


def _yaml_where(exc: yaml.YAMLError) -> str:
    """`` (line L, column C): problem`` from a PyYAML error (1-based positions)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{where}: {problem}" if problem else where


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def loader_problem(exc: BaseException) -> str:
    """Words for an error kr8s raised while loading a kubeconfig (no repr, no traceback).

    Args:
        exc: typically a ``KeyError`` (missing key), ``TypeError``/``IndexError``/
            ``AttributeError`` (unexpected structure), ``ValueError`` (kr8s's own message,
            e.g. ``No such context x``) or a ``yaml.YAMLError``.

    Returns:
        E.g. ``"missing key 'server'"``, ``"unexpected structure (list indices must be
        integers or slices, not str)"``, ``"invalid YAML (line 2, column 1): ..."``.
    """
    if isinstance(exc, yaml.YAMLError):
        return f"invalid YAML{_yaml_where(exc)}"
    if isinstance(exc, KeyError):
        return f"missing key {exc.args[0]!r}" if exc.args else "a key is missing"
    if isinstance(exc, TypeError | IndexError | AttributeError):
        return f"unexpected structure ({exc})"
    return str(exc) or type(exc).__name__


def missing_kubeconfig_problem(env_value: str, paths: Sequence[Path]) -> str:
    """Why no kubeconfig was found, naming the ``$KUBECONFIG`` files that do not exist.

    Args:
        env_value: ``$KUBECONFIG`` (may be empty).
        paths: the candidate files that were looked for (none exists).

    Returns:
        E.g. ``"KUBECONFIG names /nonexistent, which does not exist"`` or ``"no kubeconfig
        (set KUBECONFIG or --kubeconfig)"`` when ``$KUBECONFIG`` is unset.
    """
    if not env_value:
        return (
            f"no kubeconfig at {paths[0]} (set KUBECONFIG or --kubeconfig)"
            if paths
            else ("no kubeconfig (set KUBECONFIG or --kubeconfig)")
        )
    names = ", ".join(str(path) for path in paths)
    verb = "does" if len(paths) == 1 else "do"
    return f"KUBECONFIG names {names}, which {verb} not exist"
