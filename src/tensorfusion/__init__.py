"""TensorFusion for Python: GPU pooling and fractional-GPU control plane for Kubernetes."""

__version__ = "0.1.0"
