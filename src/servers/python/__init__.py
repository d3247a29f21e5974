"""The built-in Python Runtime Server (console script krt-python-runtime).

:class:`servers.python.adapter.PythonAdapter` plugs Python into the shared machinery:
tasks run ``python <entrypoint> <args...>``; a function handler ``module.function`` is
imported once into a warm worker process (:mod:`servers.python.worker`, standard library
only) that then serves invocations over length-prefixed frames (:mod:`servers.python.framing`).
"""
