"""Finding one error inside the exception groups trio nurseries raise.

Shared by the ``krt`` commands (which map a failure to an exit code) and the daemons (which
tell a planned stop from a crash).
"""

from __future__ import annotations

__all__ = ["first_leaf"]


def first_leaf(
    exc: BaseException, types: type[BaseException] | tuple[type[BaseException], ...]
) -> BaseException | None:
    """The first error of ``types`` in ``exc``, searching exception groups depth first.

    A trio nursery wraps what its tasks raise in exception groups, so a command that runs one
    finds its failure here.

    Args:
        exc: what a ``trio.run`` raised.
        types: the error types wanted (as for ``isinstance``).

    Returns:
        The error, or None when ``exc`` holds none of ``types``.
    """
    if isinstance(exc, types):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            leaf = first_leaf(inner, types)
            if leaf is not None:
                return leaf
    return None
