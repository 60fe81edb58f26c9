"""Versioned chunk repository: images, versions, CLONE/COMMIT, GC."""
