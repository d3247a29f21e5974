"""The kruntimes control plane: Runtime controller, scheduler, stale-Run reaper, completed-Run GC.

Runs as one leader-elected process (``krt-controlplane``, :mod:`krt.controlplane.__main__`):
one trio nursery tree over shared informers (Runs, Runtimes, Pods, Leases, EndpointSlices,
Deployments). Every decision is a pure function over plain data (``scheduling``,
``fencing``, ``runtime_resources``, ``capacity``); the ``*_loop`` modules do the I/O.

It talks only to the Kubernetes API (through :mod:`krt.kube`) and imports only
:mod:`krt.api` and :mod:`krt.kube`; it must not import ``runtimed``, ``gateway`` or
``localkube``. The names of the objects it creates are :mod:`krt.api.naming`, shared with
the gateway, runtimed and the CLI.
"""
