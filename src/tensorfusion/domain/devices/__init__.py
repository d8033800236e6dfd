"""What a node agent knows of its GPUs: the device inventory, its samples, and the providers
(NVML on real nodes, a simulated one for tests, the simulator and demos) behind one interface."""
