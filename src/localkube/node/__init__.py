"""localkube's node: the kubelet-like Pod runner (Pods as local process groups).

Talks to the API server only through the Kubernetes API. Entry point:
:func:`localkube.node.kubelet.serve_node`; on-disk layout in :mod:`localkube.node.layout`;
log reading for ``pods/{name}/log`` in :mod:`localkube.node.logs`. Never imported by
production code.
"""
