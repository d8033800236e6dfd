"""The scheduler extender on the leader: filter, prioritize and bind for the child kube-scheduler
(scheduling.md §12, §14, §15), and the child kube-scheduler it runs."""
