# Copyright BlobCR for OpenStack developers. Apache-2.0.
"""pbr packaging plus the native C core, built as a CPython extension."""

import setuptools

native = setuptools.Extension(
    'blobcr_agent._native',
    sources=['native/blobcr_native.c', 'native/mirror.c'],
    extra_link_args=['-pthread'],
    extra_compile_args=['-O2', '-std=c11', '-Wall', '-Werror'],
)

setuptools.setup(
    setup_requires=['pbr>=5.8'],
    pbr=True,
    ext_modules=[native],
)
