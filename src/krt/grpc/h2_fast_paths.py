"""Faster equivalents of three small per-frame helpers of h2 3.2 and hyperframe 5.2.

Every unary call of ours is five HTTP/2 frames (request HEADERS and DATA, response HEADERS,
DATA and trailers), and h2 (3.2, the version purerpc 0.8.0 needs) spends a fixed amount of
pure-Python bookkeeping on each one on both ends, on top of the protocol work. Three pieces
of that bookkeeping cost far more than the work they do; :func:`install` replaces each with
a function or class giving the same results, and leaves h2's state machines, flow control,
framing and HPACK as they are:

* **Frame flags.** Every frame built or parsed gets a :class:`hyperframe.flags.Flags`: a
  Python ``MutableSet`` whose constructor rebuilds the set of valid flag names from the
  frame class's definitions through a generator, and whose ``in`` (h2 asks about a dozen
  times per frame) is a Python method. :class:`FrameFlags` is a ``set`` with the same check
  on ``add`` (``ValueError`` for a flag the frame type does not define), the valid names
  built once per frame type.
* **Enum operations in the state machines.** h2 looks each state transition up in a dict
  keyed by ``(state, input)``; three of its enums (``StreamInputs``, ``ConnectionState``,
  ``ConnectionInputs``) hash through :meth:`enum.Enum.__hash__`, a Python method, so each
  of the ~24 transitions per call (both ends) made two or three Python calls just to hash
  its key. Enum members are singletons compared by identity, so identity hashing agrees
  with their equality; the two transition tables (h2's only containers keyed by these
  members) are rebuilt with the new hashes, at import, before any connection. And each
  new stream and header block looks its stream-ID parity up as ``AllowedStreamIDs(flag)``,
  two Python-level enum calls; :class:`StreamIDParity` answers the same member from a dict.
* **Header validation flags.** h2 builds a ``HeaderValidationFlags`` tuple for every header
  block sent or received, which only its header normalization and validation passes read.
  Our connections switch all four passes off (:mod:`krt.grpc.header_checks` does the checks
  in one pass, :mod:`krt.grpc.event_translation` the inbound normalization); for a
  connection whose configuration is a :class:`PlainH2Configuration` (set per connection by
  :func:`use_plain_configuration`, whose options are plain attributes, cheap for h2's
  twenty-odd reads per call) with all four off, the tuple is not built. Any other
  connection (hypercorn's, say) is unaffected.

Issue 6, callgrind, instructions saved per unary call (client and server h2 state together,
sans-IO): flags ~50,000, enum operations ~44,000, validation flags with plain configurations
~48,000; a whole unary call (both ends in one process over loopback TCP, trio included)
was ~1.21 million instructions, so about 4%, 3.5% and 4%. Measured and left out (under
3% of a call each): a faster ``is_informational_response`` (~13,000), and acknowledging
received data in bulk instead of per message (~17,000: h2 already sends WINDOW_UPDATE only
once half a window is used, and purerpc opens the connection window to 1 GiB, so no call
sends one).

The replacements are installed only on the versions they were written against (h2 3.2.x,
hyperframe 5.x, checked structurally too); on anything else :func:`install` leaves the
libraries alone (correct, only slower) and says so in its return value.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Final

import h2
import h2.config
import h2.connection
import h2.stream
import hyperframe  # type: ignore[import-untyped]
import hyperframe.flags  # type: ignore[import-untyped]
import hyperframe.frame  # type: ignore[import-untyped]

__all__ = [
    "FrameFlags",
    "StreamIDParity",
    "PlainH2Configuration",
    "install",
    "installed",
    "use_plain_configuration",
]

_installed: list[str] = []
#: id(frame class's defined_flags) -> (that sequence, its valid flag names)
_VALID_FLAGS: dict[int, tuple[Sequence[Any], frozenset[str]]] = {}


class FrameFlags(set[str]):
    """A frame's flags: :class:`hyperframe.flags.Flags` as a ``set`` (same checks).

    Args:
        defined_flags: the frame class's ``defined_flags`` (``Flag(name, bit)`` pairs).

    Raises:
        ValueError: from :meth:`add`, for a flag the frame type does not define (the
            message as hyperframe's).
    """

    __slots__ = ("_valid_flags",)

    def __init__(self, defined_flags: Sequence[Any]) -> None:
        # set's own __init__ is not needed: a new set is empty. The table holds each
        # definition it was built from, so an id found in it is that same live object.
        known = _VALID_FLAGS.get(id(defined_flags))
        if known is None:
            known = (defined_flags, frozenset(flag.name for flag in defined_flags))
            _VALID_FLAGS[id(defined_flags)] = known
        self._valid_flags = known[1]

    def add(self, value: str) -> None:
        """Set flag ``value``.

        Raises:
            ValueError: the frame type defines no flag ``value``.
        """
        if value not in self._valid_flags:
            raise ValueError(f"Unexpected flag: {value}. Valid flags are: {set(self._valid_flags)}")
        super().add(value)


#: H2Configuration's boolean options and header encoding (descriptors and a property).
_OPTIONS: Final = (
    "client_side",
    "validate_outbound_headers",
    "normalize_outbound_headers",
    "validate_inbound_headers",
    "normalize_inbound_headers",
    "header_encoding",
)


class PlainH2Configuration(h2.config.H2Configuration):  # type: ignore[misc]
    """An ``H2Configuration`` whose options are plain attributes (no per-read descriptor).

    h2 reads its configuration's options through Python descriptors about twenty times per
    unary call (both ends). Our connections set their options once, to valid values, right
    after purerpc creates them, so the options are plain instance attributes here; the
    values are those of the configuration it replaces (see :func:`use_plain_configuration`).
    """

    client_side = False
    validate_outbound_headers = True
    normalize_outbound_headers = True
    validate_inbound_headers = True
    normalize_inbound_headers = True
    header_encoding: Any = None


def use_plain_configuration(h2_connection: Any) -> None:
    """Make ``h2_connection``'s configuration a :class:`PlainH2Configuration` (same values).

    Args:
        h2_connection: an :class:`h2.connection.H2Connection` (its streams share its
            configuration object, so they see the change too).
    """
    config = h2_connection.config
    if type(config) is PlainH2Configuration:
        return
    values = {name: getattr(config, name) for name in _OPTIONS}
    config.__class__ = PlainH2Configuration
    config.__dict__.update(values)


def _checks_off(config: Any) -> bool:
    """Whether none of h2's header normalization or validation passes runs for ``config``.

    Only a :class:`PlainH2Configuration` is asked (its options are cheap to read); any
    other configuration counts as checking.
    """
    return type(config) is PlainH2Configuration and not (
        config.validate_inbound_headers
        or config.normalize_inbound_headers
        or config.validate_outbound_headers
        or config.normalize_outbound_headers
    )


def _install_flags() -> bool:
    if not hyperframe.__version__.startswith("5."):
        return False
    if "Flags" not in hyperframe.frame.Frame.__init__.__code__.co_names:
        return False
    if hyperframe.frame.Flags is not hyperframe.flags.Flags:
        return hyperframe.frame.Flags is FrameFlags
    hyperframe.flags.Flags.register(FrameFlags)  # isinstance(frame.flags, Flags) still holds
    hyperframe.frame.Flags = FrameFlags
    return True


class StreamIDParity(dict[Any, Any]):
    """``AllowedStreamIDs(flag)`` as a dict lookup: calling it returns the enum member.

    Stands in for ``h2.connection.AllowedStreamIDs`` (an ``IntEnum``), which h2 calls with
    ``client_side`` (a bool) for every stream it opens and header block it receives, and
    whose ``EVEN`` and ``ODD`` members it also reads by name.

    Args:
        members: the ``AllowedStreamIDs`` enum.

    Raises:
        KeyError: when called with a value that is no member's (the enum raises
            ``ValueError``; h2 only ever passes a bool).
    """

    __call__ = dict.__getitem__

    def __init__(self, members: type[enum.IntEnum]) -> None:
        super().__init__({member.value: member for member in members})
        for member in members:
            setattr(self, member.name, member)


def _install_enum_operations() -> bool:
    enums = (h2.stream.StreamInputs, h2.connection.ConnectionState, h2.connection.ConnectionInputs)
    tables: tuple[Any, ...] = (
        h2.stream._transitions,
        h2.connection.H2ConnectionStateMachine._transitions,
    )
    parity = h2.connection.AllowedStreamIDs
    if isinstance(parity, StreamIDParity):
        return True
    if not all(isinstance(table, dict) for table in tables):
        return False
    if not issubclass(parity, enum.IntEnum) or {m.name for m in parity} != {"EVEN", "ODD"}:
        return False
    if not all(issubclass(c, enum.Enum) and c.__hash__ is enum.Enum.__hash__ for c in enums):
        return False
    for cls in enums:
        cls.__hash__ = object.__hash__  # type: ignore[method-assign,assignment]
    for table in tables:  # re-insert every key under its new hash
        items = list(table.items())
        table.clear()
        table.update(items)
    h2.connection.AllowedStreamIDs = StreamIDParity(parity)
    return True


def _install_validation_flags() -> bool:
    stream_class: Any = h2.stream.H2Stream
    original = getattr(stream_class, "_build_hdr_validation_flags", None)
    if original is None:
        return False
    if getattr(original, "_krt_fast_path", False):
        return True

    def build_hdr_validation_flags(self: Any, events: Any) -> Any:
        if _checks_off(self.config):
            return None  # read only by the passes, which are all off
        return original(self, events)

    build_hdr_validation_flags._krt_fast_path = True  # type: ignore[attr-defined]
    stream_class._build_hdr_validation_flags = build_hdr_validation_flags
    return True


def install() -> list[str]:
    """Install the replacements that fit the installed h2 and hyperframe (idempotent).

    Returns:
        The names of the replacements in place (``flags``, ``enum-operations``,
        ``validation-flags``): all three on h2 3.2.x with hyperframe 5.x, none on other
        versions.
    """
    if _installed or not h2.__version__.startswith("3.2."):
        return list(_installed)
    for name, apply in (
        ("flags", _install_flags),
        ("enum-operations", _install_enum_operations),
        ("validation-flags", _install_validation_flags),
    ):
        if apply():
            _installed.append(name)
    return list(_installed)


def installed() -> list[str]:
    """The replacements :func:`install` put in place so far."""
    return list(_installed)
