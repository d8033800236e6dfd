"""The kubelet side of the node agent: index-resource device plugins (device-plugin API
v1beta1) and what other device plugins hand out (pod-resources API v1, checkpoint file)."""
