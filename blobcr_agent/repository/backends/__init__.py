"""Object backends of the repository, chosen by ``[repository] backend``."""

import importlib

from blobcr_agent import exception

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
