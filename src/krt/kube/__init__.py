"""Kubernetes access for every kruntimes component: client, informers, queues, status, leases.

What is here (import from the modules; this package re-exports nothing):

* :mod:`~krt.kube.client`: :func:`~krt.kube.client.connect` and :class:`~krt.kube.client.Kube`,
  typed REST verbs over plain dicts (kr8s supplies config, auth and TLS).
* :mod:`~krt.kube.kr8s_auth`, :mod:`~krt.kube.tls_material`: kr8s's authentication with
  inline kubeconfig credentials kept in memory (kr8s's credential temporary files are
  deleted as soon as written) and the TLS context built from them.
* :mod:`~krt.kube.http11`: the keep-alive HTTP/1.1 pool the client sends over (usual
  responses read by :mod:`~krt.kube.http11_response`, others by h11; TLS by
  :mod:`krt.tls_stream`).
* :mod:`~krt.kube.interface`: :class:`~krt.kube.interface.KubeClient`, the Protocol the
  rest depends on (so controller tests can pass a fake of our wrapper).
* :mod:`~krt.kube.errors`: one exception class per Kubernetes Status reason.
* :mod:`~krt.kube.resources`: :class:`~krt.kube.resources.ResourceRef` and the types we use.
* :mod:`~krt.kube.informer`: list + watch caches with handlers and indexes.
* :mod:`~krt.kube.workqueue`: keyed, deduplicated, per-key sequential reconcile queue.
* :mod:`~krt.kube.status`: conditional status writes and Pod-condition patches.
* :mod:`~krt.kube.leaderelection`, :mod:`~krt.kube.heartbeat`: Lease-based leader
  election and the per-Pod runtimed heartbeat.
* :mod:`~krt.kube.events`: a non-blocking, aggregating Event recorder.
* :mod:`~krt.kube.access`: SelfSubjectAccessReview as the caller
  (with :meth:`~krt.kube.client.Kube.with_token`).
* :mod:`~krt.kube.clock`, :mod:`~krt.kube.backoff`: the injectable wall clock, RFC 3339
  timestamps, jittered exponential backoff.

Layering: this package may import :mod:`krt.api` (names) and libraries; it must never import
``localkube``, the daemons (``krt.controlplane``, ``runtimed``, ``gateway``) or the CLI.
Nothing here knows whether the API server is localkube or a real cluster.
"""
