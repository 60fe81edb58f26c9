"""BlobCR agent: the per-host service that owns all checkpoint data."""
