"""Authentication (admin token, ServiceAccount JWTs) and RBAC authorization for localkube.

Pure logic, no I/O and no HTTP: the API server (``localkube`` core) calls in with plain
object dicts and gets answers back.

* ``types``: UserInfo, RequestAttributes, Decision shared with the HTTP layer.
* ``tokens``: TokenAuthority, mints and verifies ServiceAccount JWTs.
* ``authn``: BearerAuthenticator (admin token + ServiceAccount tokens), header parsing.
* ``policy_rules``: one PolicyRule against one request.
* ``aggregation``: ClusterRole aggregationRule, evaluated on read.
* ``rbac``: authorize(), rules_for(), the 403 message.
* ``reviews``: (Self/Local)SubjectAccessReview, TokenReview, SelfSubjectRulesReview,
  SelfSubjectReview request -> response functions.
* ``token_request``: TokenRequest (``serviceaccounts/token``) request -> response.

Key material lives in ``localkube.pki``; the default roles in ``localkube.bootstrap_rbac``.
"""
