"""The simulator: a virtual cluster, a workload trace and the same core the controller runs."""
