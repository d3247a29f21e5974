"""The Runtime gateway: HTTPS invoke front door that forwards to runtimed over gRPC."""
