"""Authentication (admin token, ServiceAccount JWTs) and RBAC authorization for localkube."""
