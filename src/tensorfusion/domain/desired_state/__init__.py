"""What the controller's reconcilers want the cluster to look like (pure, no I/O).

Object bodies (the GPUPools of a TensorFusionCluster, the GPUNode of a Kubernetes Node), status
patches (cluster, pool, GPUNode, GPU, quota) and phases, computed from cached API objects and
the allocator's memory. The reconcilers of `tensorfusion.controller` read their caches, call
these functions and write what they return; nothing here talks to the API server.
"""
