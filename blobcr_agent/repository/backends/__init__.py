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

"""Object backends of the repository, chosen by ``[repository] backend``."""

import importlib

from blobcr_common import exception

BACKENDS = {
    'local': 'blobcr_agent.repository.backends.local.LocalBackend',
    'rados': 'blobcr_agent.repository.backends.rados.RadosBackend',
}


def backend_class(name):
    try:
        module, _, cls = BACKENDS[name].rpartition('.')
    except KeyError:
        raise exception.InvalidInput('unknown backend %r (choose from %s)'
                                     % (name, ', '.join(sorted(BACKENDS))))
    return getattr(importlib.import_module(module), cls)


def from_conf(conf):
    return backend_class(conf.repository.backend).from_conf(conf)
