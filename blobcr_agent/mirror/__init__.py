"""The FUSE mirror: live incremental snapshots of attached images."""
