"""Console scripts of the BlobCR agent."""
