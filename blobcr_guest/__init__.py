"""Guest side of BlobCR: request checkpoints from inside a VM."""
