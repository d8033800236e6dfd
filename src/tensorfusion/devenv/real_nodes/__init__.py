"""Real nodes on one machine, like kind without Docker: a kubelet and a containerd per node, the
control plane, kube-proxy and CoreDNS, all inside network namespaces the run creates and removes
(docs/testing.md, "Real nodes")."""
