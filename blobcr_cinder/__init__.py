"""BlobCR's Cinder side: the volume driver (volumes are images, snapshots
are versions), its options, blobcr-cinder-sync and the OSC commands
(``osc/``).

May import: Cinder, oslo.*, the OpenStack clients and the agent's RPC
client (blobcr_agent.rpc) with what it returns. Never imports the lab,
the benchmarks or the tests (tests/unit/test_import_contract.py).
"""
