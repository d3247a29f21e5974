"""The image table: which container images localkube can run, and as which local command.

localkube has no container runtime. A container image is a *name* for a local command in the
same virtualenv (the console scripts kruntimes installs), so a Pod of ``kruntimes/runtimed``
runs the ``krt-runtimed`` console script as a process group. An image that is not in the
table cannot run: the node leaves its Pod Pending with reason ``ErrImagePull`` and the
message from :class:`UnknownImageError`.

Image names are normalised before lookup: a registry host (``docker.io/``, ``ghcr.io/...``
keeps its path), a ``library/`` prefix, a ``:tag`` and an ``@sha256:...`` digest are
dropped, so ``docker.io/kruntimes/runtimed:0.1.0`` and ``kruntimes/runtimed`` are the same
entry.

Entries follow Docker's ENTRYPOINT/CMD rules (which Kubernetes maps to ``command`` and
``args``): a container's ``command`` replaces the entrypoint (and drops the default args),
its ``args`` replace the default args.

The table can be extended or overridden by a YAML or JSON file::

    images:
      example/worker:
        entrypoint: ["{bin}/my-worker"]   # {bin}: this virtualenv's bin directory
        args: ["--verbose"]               # {python}: this interpreter
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

#: The directory holding this virtualenv's console scripts.
VENV_BIN = Path(sys.executable).parent


class UnknownImageError(LookupError):
    """An image that is not in the table.

    Attributes:
        image: the image as the Pod spec wrote it.
        known: the normalised names localkube can run, sorted.
    """

    def __init__(self, image: str, known: list[str]) -> None:
        self.image = image
        self.known = known
        super().__init__(
            f'image "{image}" is not in the localkube image table: localkube runs only '
            f"the listed images ({', '.join(known)}), as local commands"
        )


class ImageTableError(ValueError):
    """An image table file that cannot be used (names the file and the field)."""


@dataclass(frozen=True)
class ImageEntry:
    """How one image runs locally.

    Attributes:
        name: the normalised image name, e.g. ``kruntimes/runtimed``.
        entrypoint: argv prefix (the image's ENTRYPOINT), e.g. ``["/venv/bin/krt-runtimed"]``.
        args: default arguments (the image's CMD), used when the container gives no
            ``command`` and no ``args``.
        description: one line for ``krt dev status`` and error messages.
    """

    name: str
    entrypoint: tuple[str, ...]
    args: tuple[str, ...] = ()
    description: str = ""

    def argv(self, command: list[str] | None, args: list[str] | None) -> list[str]:
        """Return the argv a container runs (Kubernetes ``command``/``args`` semantics).

        Args:
            command: the container's ``command`` (replaces the entrypoint) or None.
            args: the container's ``args`` (replace the default args) or None.

        Raises:
            ValueError: if the result is empty (an image without entrypoint and a container
                without command).
        """
        if command:
            argv = list(command) + list(args or [])
        else:
            argv = list(self.entrypoint) + (list(args) if args is not None else list(self.args))
        if not argv:
            raise ValueError(f"image {self.name} has no entrypoint and the container no command")
        return argv


def normalize_image(image: str) -> str:
    """Return the lookup key for an image reference.

    ``docker.io/library/busybox:1.36`` -> ``busybox``; ``ghcr.io/x/y@sha256:ab`` ->
    ``ghcr.io/x/y``; ``kruntimes/runtimed:dev`` -> ``kruntimes/runtimed``.
    """
    name = image.strip()
    name = name.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name = name[:colon]
    for prefix in ("docker.io/", "index.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    if name.startswith("library/"):
        name = name[len("library/") :]
    return name


def _expand(value: str) -> str:
    return value.replace("{bin}", str(VENV_BIN)).replace("{python}", sys.executable)


def _script(name: str) -> tuple[str, ...]:
    return (str(VENV_BIN / name),)


def default_entries() -> dict[str, ImageEntry]:
    """Return the built-in table: kruntimes' components and two small test images.

    The kruntimes images map to this virtualenv's console scripts (``krt-runtimed``,
    ``krt-controlplane``, ``krt-gateway``, ``krt-python-runtime``, ``krt-bash-runtime``);
    a script that is not installed makes the container fail to start with a message
    naming it. ``localkube/python`` is this interpreter; ``localkube/tcp-echo`` is a TCP
    echo server on ``$POD_IP:$PORT`` (defaults 127.0.0.1:8080).
    """
    entries = [
        ImageEntry("kruntimes/runtimed", _script("krt-runtimed"), (), "runtimed sidecar"),
        ImageEntry("kruntimes/controlplane", _script("krt-controlplane"), (), "control plane"),
        ImageEntry("kruntimes/gateway", _script("krt-gateway"), (), "Runtime gateway"),
        ImageEntry(
            "kruntimes/python-runtime", _script("krt-python-runtime"), (), "Python Runtime Server"
        ),
        ImageEntry(
            "kruntimes/bash-runtime", _script("krt-bash-runtime"), (), "Bash Runtime Server"
        ),
        ImageEntry("localkube/python", (sys.executable,), (), "this Python interpreter"),
        ImageEntry(
            "localkube/tcp-echo",
            (sys.executable, "-m", "localkube.node.tcp_echo"),
            (),
            "TCP echo server on $POD_IP:$PORT",
        ),
    ]
    return {e.name: e for e in entries}


@dataclass
class ImageTable:
    """The images localkube can run.

    Attributes:
        entries: normalised name -> entry.
    """

    entries: dict[str, ImageEntry] = field(default_factory=default_entries)

    def resolve(self, image: str) -> ImageEntry:
        """Return the entry for ``image``.

        Raises:
            UnknownImageError: if the normalised name is not in the table.
        """
        try:
            return self.entries[normalize_image(image)]
        except KeyError:
            raise UnknownImageError(image, sorted(self.entries)) from None

    @classmethod
    def load(cls, path: Path | None) -> ImageTable:
        """Return the built-in table overlaid with the entries of a YAML/JSON file.

        Args:
            path: a file with a top-level ``images`` mapping (see the module docstring),
                or None for the built-in table only.

        Raises:
            ImageTableError: if the file cannot be read or parsed, or an entry is malformed
                (the message names the file and the entry).
        """
        table = cls()
        if path is None:
            return table
        try:
            text = path.read_text()
            raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise ImageTableError(f"{path}: cannot read the image table: {exc}") from exc
        table.entries.update(parse_entries(raw, source=str(path)))
        return table


def parse_entries(raw: object, *, source: str) -> dict[str, ImageEntry]:
    """Parse the ``images`` mapping of an image table document.

    Args:
        raw: the parsed document (a mapping with key ``images``).
        source: where it came from, for error messages.

    Raises:
        ImageTableError: naming the entry and field that is wrong.
    """
    if not isinstance(raw, Mapping) or not isinstance(raw.get("images"), Mapping):
        raise ImageTableError(f"{source}: expected a mapping with an 'images' mapping")
    out: dict[str, ImageEntry] = {}
    for name, spec in raw["images"].items():
        where = f"{source}: images.{name}"
        if not isinstance(name, str) or not name:
            raise ImageTableError(f"{source}: image names must be non-empty strings")
        if not isinstance(spec, Mapping):
            raise ImageTableError(f"{where}: expected a mapping with 'entrypoint'")
        unknown = set(spec) - {"entrypoint", "args", "description"}
        if unknown:
            raise ImageTableError(f"{where}: unknown field(s) {sorted(unknown)}")
        entrypoint = spec.get("entrypoint")
        args = spec.get("args", [])
        for fname, value in (("entrypoint", entrypoint), ("args", args)):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ImageTableError(f"{where}.{fname}: expected a list of strings")
        assert isinstance(entrypoint, list)
        assert isinstance(args, list)
        if not entrypoint:
            raise ImageTableError(f"{where}.entrypoint: must not be empty")
        key = normalize_image(name)
        out[key] = ImageEntry(
            key,
            tuple(_expand(v) for v in entrypoint),
            tuple(_expand(v) for v in args),
            str(spec.get("description", "")),
        )
    return out
