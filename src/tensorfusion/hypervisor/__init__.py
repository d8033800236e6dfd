"""The node agent (`tensor-fusion hypervisor`): discovery, GPU and GPUNode objects, heartbeat."""
