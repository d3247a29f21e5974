"""kruntimes.io/v1alpha1 API: Run and Runtime types, phases, conditions, validation, CRD schemas."""
