"""Built-in Runtime Servers (Python and Bash) serving executor.v1 Runtime and FunctionRuntime.

A Runtime Server never reads Kubernetes objects, authenticates callers or routes traffic
(seed 002, Scope); it serves only runtimed on its Pod."""
