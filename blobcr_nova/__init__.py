"""BlobCR's Nova side: the vendordata provider, the notification
listener, blobcr-restart and its OSC command.

May import: oslo.*, keystonemiddleware, osc_lib and the agent's RPC
client (blobcr_agent.rpc); it talks to Nova over its API and
notifications. Never imports the lab, the benchmarks or
the tests (tests/unit/test_import_contract.py).
"""
