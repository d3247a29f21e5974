"""runtimed: the sidecar daemon of every Runtime Pod (task and function lifecycles, invoke proxy).

Talks to the Kubernetes API, its local Runtime Server and peer runtimed; never imports
localkube (or the built-in servers).

Modules (one job each):

* :mod:`runtimed.daemon` -- the nursery tree: Runtime Server channel, Run informer, task
  lifecycle, readiness, heartbeat, HTTP; :mod:`runtimed.__main__` -- the ``runtimed`` CLI.
* :mod:`runtimed.task_decisions` -- the pure task-Run decision (seed 003);
  :mod:`runtimed.tasks` -- its trio adapter (reconcile, start worker, RLEG, sweeper).
* :mod:`runtimed.sources` -- workspace layout, source preparation (inline, git), outputs.
* :mod:`runtimed.runtime_client` -- the purerpc client of the local Runtime Server and the
  :class:`~runtimed.runtime_client.RuntimeServer` protocol.
* :mod:`runtimed.readiness` -- the ``kruntimes.io/RuntimedReady`` Pod condition.
* :mod:`runtimed.httpserver`, :mod:`runtimed.metrics`, :mod:`krt.logs`,
  :mod:`runtimed.identity`.

The function lifecycle and the invoke proxy belong in their own modules beside
:mod:`runtimed.tasks`, wired into :func:`runtimed.daemon.serve_daemon`; the task lifecycle
ignores function-mode Runs.
"""
