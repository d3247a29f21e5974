"""CustomResourceDefinition schema handling for localkube: pure functions, no I/O.

The API server builds one :class:`CRDValidator` per served CRD version (a CRD whose schema
localkube cannot enforce faithfully is rejected with :class:`UnsupportedSchema` at create
time) and calls :meth:`CRDValidator.admit` on every create and update of a custom
resource. It implements the "Validation", "Defaulting", "Pruning" and "Validation rules"
sections of the Kubernetes CRD documentation.

Supported:

- structural schema checks (:func:`structural_errors`): ``type`` everywhere except under
  ``x-kubernetes-int-or-string`` / ``x-kubernetes-preserve-unknown-fields``, no
  ``uniqueItems: true``, ``properties`` xor ``additionalProperties``, value-only junctors;
  defaults must be pruned and valid.
- keywords: ``type``, ``properties``, ``required``, ``items``, ``additionalProperties``
  (bool or schema), ``enum``, ``pattern`` (RE2, searched like Go's ``MatchString``),
  ``format`` (see :mod:`localkube.crd._values`), ``minLength``/``maxLength`` (Unicode
  characters), ``minItems``/``maxItems``, ``minProperties``/``maxProperties``,
  ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``, ``multipleOf``,
  ``nullable``, ``default``, ``allOf``/``anyOf``/``oneOf``/``not``, and the extensions
  ``x-kubernetes-int-or-string``, ``-preserve-unknown-fields``, ``-embedded-resource``
  (apiVersion/kind required, envelope kept), ``-list-type`` (``set``/``map`` duplicates),
  ``-list-map-keys``, ``-map-type``, ``-validations``.
- CEL rules with ``message``, ``messageExpression``, ``reason``, ``fieldPath``,
  transition rules and ``optionalOldSelf``; see :mod:`localkube.crd._cel_compile` for
  the functions, and the constructs rejected (quantity/url/ip/cidr/format/authz/sets
  libraries, CEL optionals beyond ``oldSelf``, three-argument ``map``, message literals).

Not implemented (differences from kube-apiserver 1.32):

- CEL: no cost estimation or runtime cost budget; static type checking is limited to
  field existence on ``self``/``oldSelf``/macro variables (other type errors surface at
  admission as ``no such overload``); lists with ``x-kubernetes-list-type: set|map``
  compare order-sensitively in CEL (Kubernetes ignores order) and ``+`` concatenates;
  unknown fields under ``x-kubernetes-preserve-unknown-fields`` objects without
  ``properties`` are visible to CEL (Kubernetes hides them); ``has(self.a.b)`` with ``a``
  absent is false (cel-go reports "no such key: a"); lists compare element-wise without
  cross-type numeric equality (``[1] == [1.0]`` is false).
- validation ratcheting is partial: schema (OpenAPI) checks ratchet per top-level field
  (an unchanged ``spec`` or ``status`` is not re-validated, a changed one is validated
  whole); CEL rules without ``oldSelf`` ratchet per value, as in kube-apiserver.
- embedded resources keep ``metadata`` verbatim (Kubernetes prunes it to ObjectMeta).
- warnings for pruned unknown fields are not produced.

Evaluation uses cel-python's interpreter; rule outcomes are memoised per validator
(:class:`localkube.crd._rule_cache.RuleResultCache`), and ratcheting means writes that
leave ``spec`` unchanged (status updates) evaluate only its transition rules. Not thread-safe: use a validator from one thread, as
the trio API server does. Must not touch the network, the file system or
the storage layer; production packages never import it.
"""

from localkube.crd._fielderrors import UnsupportedSchema
from localkube.crd._schema import structural_errors
from localkube.crd._validator import CRDValidator

__all__ = ["CRDValidator", "UnsupportedSchema", "structural_errors"]
