"""GPU providers that touch the machine: NVML, and the simulated provider's file; the GPU-info
catalogue shipped with the package."""
