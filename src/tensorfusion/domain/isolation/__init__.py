"""GPU isolation on the node: what NVIDIA MPS enforces for each worker (pure)."""
