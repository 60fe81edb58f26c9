"""Guest side of BlobCR: request checkpoints from inside a VM.

Runs inside guests: the standard library only
(tests/unit/test_import_contract.py).
"""
