"""Trivial example handler for the kruntimes Python Runtime Server: ``echo.handle``.

Returns its decoded JSON input unchanged; the benchmark uses the same shape.
"""


def handle(event):
    """Return ``event`` as the invocation's output."""
    return event
