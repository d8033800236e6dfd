"""The controller: the leader's allocator, reconcilers and status writers over the runtime layer."""
