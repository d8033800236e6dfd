"""Runtime layer: informer caches, the work queue, Lease election and task supervision."""
