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
* :mod:`.settings` -- endpoint configuration, inline defaults, deadlines;
* :mod:`.metrics` -- Prometheus metrics (``runtimed_function_*``).

Daemon wiring (``runtimed.daemon.serve_daemon``), after the Run informer is built:

1. ``client = FunctionRuntimeClient(config.server_host, config.server_port)`` and
   ``await nursery.start(client.run)`` (outer nursery: a long-lived channel);
2. ``functions = FunctionLifecycle(pod=pod, cache=informer,
   writer=KubeStatusWriter(kube), finalizers=KubeFinalizers(kube), server=client,
   workspace=config.workspace, clock=clock, settings=config.functions,
   registry=registry, events=events, metrics=FunctionMetrics(metrics.registry),
   git=config.git)`` -- ``registry`` is the :class:`~.registry.FunctionRegistry` the
   invoke proxy reads;
3. ``informer.add_handler(functions.on_run_event)`` (before the informer starts, or
   followed by step 4 when added later);
4. once the informer has synced:
   ``functions.adopt(informer.by_index(ASSIGNED_POD_INDEX, pod.uid))`` and
   ``await nursery.start(functions.run)``.

Function Runs are those with ``spec.mode.function`` (:func:`~.decisions.is_function_run`);
the task lifecycle ignores them, the function lifecycle ignores task Runs.
"""
