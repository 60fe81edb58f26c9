"""BlobCR Cinder volume driver (volumes are images, snapshots are versions).

The driver itself lands with its own issue; this package is reserved so
the distribution layout is fixed from the start.
"""
