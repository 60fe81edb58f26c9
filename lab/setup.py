# Copyright BlobCR for OpenStack developers. Apache-2.0.
"""pbr packaging of the lab and the benchmarks, installed apart from the
product (../setup.cfg): cloud hosts need neither."""

import setuptools

setuptools.setup(
    setup_requires=['pbr>=5.8'],
    pbr=True,
)
