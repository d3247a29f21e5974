"""Fast positional constructors for the frozen, slotted dataclasses the parsers build.

A frozen dataclass's generated ``__init__`` sets every field through
``object.__setattr__`` (its own ``__setattr__`` refuses). The ``from_dict`` parsers build
several such objects per API object on every informer event, and that assignment was about
a third of a Run parse: with callgrind on Python 3.11, building a 13-field ``RunStatus``
costs about 26,000 instructions through ``__init__`` and 16,000 through :func:`builder`.
The builder writes each slot through its member descriptor instead. The result is the same
object: the same class, frozen, equal and hashed as one built by ``__init__``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def builder(cls: type[T]) -> Callable[..., T]:
    """A constructor taking every field of ``cls`` positionally, in declaration order.

    Args:
        cls: a ``@dataclass(frozen=True, slots=True)`` class whose fields are all init
            fields, without ``__post_init__`` (defaults are not applied: pass every field).

    Returns:
        ``build(*values) -> cls``; it raises ``TypeError`` when given the wrong number of
        values.

    Raises:
        TypeError: ``cls`` is not such a dataclass.
    """
    if (
        not dataclasses.is_dataclass(cls)
        or "__slots__" not in cls.__dict__
        or hasattr(cls, "__post_init__")
        or not all(field.init for field in dataclasses.fields(cls))
    ):
        raise TypeError(f"{cls.__name__} is not a slotted dataclass without __post_init__")
    setters = tuple(cls.__dict__[field.name].__set__ for field in dataclasses.fields(cls))
    count = len(setters)

    def arity_error(given: int) -> TypeError:
        return TypeError(f"{cls.__name__} has {count} fields, got {given} values")

    # One line per slot instead of a loop over zip(): about 40% less time per object
    # (issue 6). The generated text holds only indices, never a field or class name.
    lines = [
        "def build(*values):",
        f"    if len(values) != {count}:",
        "        raise _arity_error(len(values))",
        "    obj = _new(_cls)",
        *(f"    _set{index}(obj, values[{index}])" for index in range(count)),
        "    return obj",
    ]
    namespace: dict[str, Any] = {
        "_arity_error": arity_error,
        "_new": object.__new__,
        "_cls": cls,
        **{f"_set{index}": setter for index, setter in enumerate(setters)},
    }
    exec("\n".join(lines), namespace)  # trusted text: indices only, see above
    build: Callable[..., T] = namespace["build"]
    build.__name__ = f"build_{cls.__name__}"
    return build
