"""CustomResourceDefinition schema handling for localkube: pure functions, no I/O.

The API server builds one :class:`CRDValidator` per served CRD version (rejecting the CRD
with :class:`UnsupportedSchema` when localkube cannot enforce its schema faithfully) and
calls :meth:`CRDValidator.admit` on every create and update of a custom resource. It
implements the "Validation", "Defaulting", "Pruning" and "Validation rules" sections of
the Kubernetes CRD documentation: structural schemas, OpenAPI v3 value validation with
kube-apiserver's messages, ``x-kubernetes-*`` extensions and CEL rules (cel-python).

Must not touch the network, the file system or the storage layer; production packages
never import it.
"""

from localkube.crd._fielderrors import UnsupportedSchema
from localkube.crd._schema import structural_errors
from localkube.crd._validator import CRDValidator

__all__ = ["CRDValidator", "UnsupportedSchema", "structural_errors"]
