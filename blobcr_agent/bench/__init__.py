"""Helpers of blobcr-bench: workloads, baselines and their measurement."""
