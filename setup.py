# Copyright 2026 The BlobCR for OpenStack Authors
#
#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

# Copyright BlobCR for OpenStack developers. Apache-2.0.
"""pbr packaging plus the native C core, built as a CPython extension."""

import subprocess
import sys

import setuptools


def pkg_config(flag, package='fuse3'):
    """libfuse3's flags; none, with a warning, where pkg-config cannot
    give them: metadata commands (``setup.py --name``, sdist) need no
    libfuse3, and a build then stops at the first missing header.
    """
    try:
        out = subprocess.run(['pkg-config', flag, package], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.stderr.write('warning: pkg-config %s %s failed (%s): building '
                         'blobcr_agent._native needs libfuse3 and '
                         'pkg-config (Debian: apt install libfuse3-dev '
                         'pkg-config)\n' % (flag, package, e))
        return []
    return [word[2:] for word in out.split()]


native = setuptools.Extension(
    'blobcr_agent._native',
    sources=['native/blobcr_native.c', 'native/core.c', 'native/core_open.c',
             'native/core_io.c', 'native/core_commit.c',
             'native/core_recovery.c', 'native/core_durable.c',
             'native/core_spill.c', 'native/core_log.c',
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
