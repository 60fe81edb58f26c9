"""The tests: unit, functional (real FUSE, real stores), integration
(real RabbitMQ, Ceph, OpenStack services, QEMU guests) and native (C).
They may import everything; nothing imports them
(tests/unit/test_import_contract.py). Fixtures over the lab's services
are in lab_fixtures.py, loaded by conftest.py.
"""
