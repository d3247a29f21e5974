"""Kubernetes access for every component: kr8s client, informers, status patching, leases."""
