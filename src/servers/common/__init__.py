"""What both built-in Runtime Servers share: task executions, the registration table and the gRPC servicers.

Public surface:

* :func:`servers.common.app.serve` -- serve ``executor.v1.Runtime`` and
  ``executor.v1.FunctionRuntime`` for one language adapter on one port;
* :func:`servers.common.cli.run_cli` -- the ``--listen``/``--work-dir`` command line;
* :mod:`servers.common.adapter` -- the seam a language adapter implements.

Rules live in I/O-free modules (:mod:`~servers.common.registrations`,
:mod:`~servers.common.validation`); :mod:`~servers.common.functions` and
:mod:`~servers.common.executions` do the trio I/O. A Runtime Server never reads
Kubernetes objects or authenticates callers (seed 002, "Scope"): nothing here imports
``krt.kube``, ``runtimed`` or ``localkube``.
"""
