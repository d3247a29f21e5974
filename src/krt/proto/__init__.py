"""Generated protobuf messages and purerpc stubs for package executor.v1 (see protos/).

Regenerate with make protos; never edit by hand."""
