"""The GPU store and its accounting: GPUs, allocation records, quotas, oversubscription and
recovery (scheduling.md §3, §5, §6, §9); the scheduling plugins that read it live in
`domain/scheduling`."""
