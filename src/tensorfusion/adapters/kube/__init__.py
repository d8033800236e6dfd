"""The Kubernetes API: the client, our custom resources, and the CRD presence check."""
