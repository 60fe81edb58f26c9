# Copyright BlobCR for OpenStack developers. Apache-2.0.
"""pbr packaging plus the native C core, built as a CPython extension."""

import subprocess

import setuptools


def pkg_config(flag, package='fuse3'):
    out = subprocess.run(['pkg-config', flag, package], check=True,
                         capture_output=True, text=True).stdout
    return [word[2:] for word in out.split()]


native = setuptools.Extension(
    'blobcr_agent._native',
    sources=['native/blobcr_native.c', 'native/core.c', 'native/core_open.c',
             'native/core_io.c', 'native/core_commit.c',
             'native/core_recovery.c', 'native/core_durable.c',
             'native/mirror.c', 'native/fuseloop.c'],
    depends=['native/core.h', 'native/core_internal.h', 'native/mirror.h'],
    include_dirs=pkg_config('--cflags-only-I'),
    libraries=pkg_config('--libs-only-l'),
    extra_link_args=['-pthread'],
    extra_compile_args=['-O2', '-std=c11', '-Wall', '-Werror'],
)

setuptools.setup(
    setup_requires=['pbr>=5.8'],
    pbr=True,
    ext_modules=[native],
)
