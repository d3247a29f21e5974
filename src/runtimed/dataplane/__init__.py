"""runtimed's invoke dataplane: the FunctionRuntime proxy on the Runtime Service port (issue 8).

Seeds 000 (Runtime Gateway, Ownership Epoch and Fencing, Authentication and Authorization,
Invoke Contract, Capacity and Concurrency) and 002 (the proxy hop with an empty
``registration_id``). Reads the daemon's Run informer, a Pod informer and the function
registry; calls the local Runtime Server and peer runtimed. Never reads the Kubernetes API on
the invoke path except SelfSubjectAccessReviews on authorization cache misses; never imports
``localkube``.

Modules (one job each):

* :mod:`.ownership` -- the watch-backed cache: Run UID -> assigned Pod, attempt, readiness;
  Pod UID -> address, readiness;
* :mod:`.routing` -- the pure routing decision (404 / 503 / local / one hop; fencing);
* :mod:`.authz` -- the SelfSubjectAccessReview cache (30 s, token ``exp``, coalescing);
* :mod:`.tokens` -- bearer token, digest, unverified ``exp``;
* :mod:`.slots` -- one in-flight invocation per Run (429);
* :mod:`.proxy` -- :class:`~.proxy.InvokeProxy`, the servicer (trio adapter of the above);
* :mod:`.channels` -- outgoing gRPC connections whose cancellation resets the stream;
* :mod:`.peer` -- mutual TLS material and peer verification;
* :mod:`.server` -- the listener; :mod:`.app` -- ``serve_dataplane`` (daemon wiring);
* :mod:`.metrics` -- Prometheus metrics.
"""
