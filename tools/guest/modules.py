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

"""Print the kernel modules to insmod, dependencies first.

usage: modules.py MODULES_DIR NAME...

MODULES_DIR is an extracted /lib/modules/VERSION of a Debian kernel
package. The package has no modules.dep (depmod makes it on install) and
the host may have no kmod, so the dependencies are read from each .ko's
.modinfo section ("depends=a,b"). Prints paths relative to MODULES_DIR.
"""

import os
import struct
import sys


def modinfo(path):
    with open(path, 'rb') as f:
        data = f.read()
    if data[:4] != b'\x7fELF' or data[4] != 2:
        raise SystemExit('%s: not an ELF64 module' % path)
    shoff, = struct.unpack_from('<Q', data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3a)

    def section(i):
        # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size
        name, _t, _f, _a, off, size = struct.unpack_from(
            '<IIQQQQ', data, shoff + i * shentsize)
        return name, off, size

    _n, stroff, _s = section(shstrndx)
    for i in range(shnum):
        name, off, size = section(i)
        end = data.index(b'\0', stroff + name)
        if data[stroff + name:end] == b'.modinfo':
            fields = {}
            for item in data[off:off + size].split(b'\0'):
                key, _sep, value = item.decode('utf-8', 'replace').partition(
                    '=')
                fields.setdefault(key, value)
            return fields
    return {}


def main():
    top = sys.argv[1]
    paths = {}
    for root, _dirs, files in os.walk(os.path.join(top, 'kernel')):
        for f in files:
            if f.endswith('.ko'):
                # Module names use _ where file names may use -.
                paths[f[:-3].replace('-', '_')] = os.path.join(root, f)
    order = []

    def visit(name, stack):
        name = name.replace('-', '_')
        if name in order:
            return
        if name not in paths:
            raise SystemExit('module %s not found (needed by %s)'
                             % (name, ' <- '.join(stack) or 'arguments'))
        deps = modinfo(paths[name]).get('depends', '')
        for dep in filter(None, deps.split(',')):
            visit(dep, [name] + stack)
        order.append(name)

    for name in sys.argv[2:]:
        visit(name, [])
    for name in order:
        print(os.path.relpath(paths[name], top))


if __name__ == '__main__':
    main()
