"""Versioned chunk repository: images, versions, CLONE/COMMIT, GC.

``repository.Repository`` is the facade over one module per concern
(its docstring has the map); ``image`` is the header's data model,
``tree`` the path-copying version tree, ``chunks`` chunk naming and
compression, ``gc`` garbage collection, ``groups`` group checkpoints,
``backends/`` the local store and Ceph RADOS.

May import: the standard library, blobcr_agent's exception, crashpoint
and _native, and rados (in backends/rados.py). Never imports the mirror,
the manager or anything above them.
"""
