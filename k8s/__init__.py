"""Talking to Kubernetes: clients, watches, leader election, our CRDs (k8s/crds/)."""
