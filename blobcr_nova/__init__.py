"""BlobCR Nova side (vendordata provider, notifications, restart).

The code lands with its own issue; this package is reserved so the
distribution layout is fixed from the start.
"""
