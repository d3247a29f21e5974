"""runtimed: the sidecar daemon of every Runtime Pod (task and function lifecycles, invoke proxy).

Talks to the Kubernetes API, its local Runtime Server and peer runtimed; never imports localkube."""
