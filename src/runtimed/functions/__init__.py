"""runtimed's function-Run lifecycle (seeds 000, 001, 002; issue 7).

Registration (claim, finalizer, source, digest, RegisterFunction, Ready with endpoint),
health and timeouts (one idle poller per Ready Run), cancellation and deletion (the cleanup
sequence), and recovery (re-adoption after a runtimed restart, re-registration after a
Runtime Server restart). Imports :mod:`krt.api`, :mod:`krt.kube` and runtimed's shared
modules (sources, identity, events, the task lifecycle's cache/writer protocols); never
``localkube`` or the built-in servers.

Modules (one job each):

* :mod:`.decisions` -- the pure decision (what next, given the Run and local knowledge);
* :mod:`.lifecycle` -- :class:`~.lifecycle.FunctionLifecycle`, its trio adapter;
* :mod:`.client` -- the purerpc FunctionRuntime client and the :class:`~.client.FunctionServer`
  protocol;
* :mod:`.registry` -- Run UID -> registration ID/readiness (read by the invoke proxy);
* :mod:`.idle` -- the per-Run idle/health poller;
* :mod:`.digest` -- ``registration_digest``;
* :mod:`.finalizers` -- conditional finalizer edits;
* :mod:`.settings` -- endpoint configuration, inline defaults, deadlines.

Daemon wiring (``runtimed.daemon.serve_daemon``): build a
:class:`~.client.FunctionRuntimeClient` for the Runtime Server address and start its
``run`` in the outer nursery; build ``FunctionLifecycle(pod=..., cache=informer,
writer=KubeStatusWriter(kube), finalizers=KubeFinalizers(kube), server=client,
workspace=..., clock=clock, settings=FunctionSettings(gateway_url=..., ca_bundle=...),
events=events)``; ``informer.add_handler(functions.on_run_event)`` before the informer
starts; after it synced, ``functions.adopt(informer.by_index(ASSIGNED_POD_INDEX, pod.uid))``
and ``await nursery.start(functions.run)``. Function Runs are those with
``spec.mode.function`` (:func:`~.decisions.is_function_run`); the task lifecycle ignores them.
"""
