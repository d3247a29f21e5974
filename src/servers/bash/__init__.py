"""The built-in Bash Runtime Server (console script ``krt-bash-runtime``).

Only the Bash-specific part lives here, behind :class:`servers.common.adapter.FunctionAdapter`:

* :mod:`servers.bash.handler`: the ``file.function`` handler shape;
* :mod:`servers.bash.task`: the argv of one-shot tasks (``bash -c <arg>`` or
  ``bash <entrypoint> <args...>``);
* :mod:`servers.bash.payload`: what input a bash function can take and how its stdout is
  labelled;
* :mod:`servers.bash.worker` with ``driver.sh``: the warm bash process per registration;
* :mod:`servers.bash.adapter`: the adapter object the shared server runs.

Registration identity, fencing, timeouts, drains and the gRPC mapping belong to
``servers.common`` and are not re-implemented here. Nothing in this package builds shell
source from a handler or a payload: both only ever travel as argv elements or data.
"""
