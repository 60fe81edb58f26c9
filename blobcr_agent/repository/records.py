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

"""Image headers and the records beside them: reads and the
compare-and-set through which every change goes.

Invariant: a header changes only through :meth:`Records.update_header`
(or :meth:`Records.update_record` for the records beside the headers):
read, ``mutate``, compare-and-set, and ``mutate`` re-run on a fresh copy
after every lost race, so a refusal raised by ``mutate`` sees the
current header and no update is ever applied over one it did not see.
"""

import hashlib
import json
import random
import time

from blobcr_agent import crashpoint
from blobcr_agent.repository import image as image_mod
from blobcr_common import exception

CAS_TRIES = 100


def digest_name(prefix, key):
    """A record's name from any JSON-able ``key`` (a project, a group
    and its project): the digest keeps names apart and within the
    backend's name rules.
    """
    return prefix + hashlib.sha256(json.dumps(key).encode()).hexdigest()[:40]


class ProjectRecord(object):
    """A record of one project beside the image headers, ``{"project",
    FIELD: entries}`` (a dict), changed by Records.update_record.
    Subclasses say its name's PREFIX and may check each entry
    (``check_entry``: ValueError, KeyError or TypeError).
    """

    PREFIX = None
    FIELD = 'entries'
    WHAT = 'project record'

    def __init__(self, project, entries=None):
        self.project = project
        self.entries = dict(entries or {})

    @classmethod
    def record_name(cls, project):
        return digest_name(cls.PREFIX, project)

    @staticmethod
    def check_entry(entry):
        pass

    @classmethod
    def decoder(cls, project):
        def decode(data):
            if data is None:
                return cls(project)
            try:
                raw = json.loads(data)
                found = cls(raw['project'], raw[cls.FIELD])
                for entry in found.entries.values():
                    cls.check_entry(entry)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise exception.CorruptObject(
                    cls.WHAT, cls.record_name(project), str(e))
            if found.project != project:
                raise exception.CorruptObject(
                    cls.WHAT, cls.record_name(project),
                    'it belongs to another project')
            return found
        return decode

    def to_bytes(self):
        return json.dumps({'project': self.project,
                           self.FIELD: self.entries},
                          sort_keys=True).encode()


class Records(object):
    """Headers by id or name, and their compare-and-set (a mixin of
    :class:`~blobcr_agent.repository.repository.Repository`).
    """

    # Compare-and-sets done and lost to another writer (stats; an
    # increment lost between threads only makes them approximate).
    cas_writes = 0
    cas_conflicts = 0
    key_writes = 0

    def _read(self, image_id):
        if '.' in image_id:
            raise exception.ImageNotFound(image_id)     # not an image id
        found = self.backend.read_header(image_id)
        if found is None:
            raise exception.ImageNotFound(image_id)
        data, token = found
        return image_mod.ImageHeader.from_bytes(data, image_id), token

    def update_header(self, image_id, mutate):
        """Apply ``mutate(header)`` by compare-and-set, retrying races.

        ``mutate`` may raise to refuse; it is re-run on a fresh header
        after every lost race, so it must not have other side effects.
        """
        def decode(data):
            if data is None:
                raise exception.ImageNotFound(image_id)
            return image_mod.ImageHeader.from_bytes(data, image_id)
        return self.update_record(image_id, decode, mutate,
                                  'header of image %s' % image_id)

    def label(self, ref, number, made_by):
        """Record who made version ``number`` (Version.made_by). A version
        that is obsolete or failed is refused (VersionNotStable): in one
        compare-and-set with the label, so that a label that keeps a
        version (a Cinder snapshot's, manage.py) and an obsolete that
        re-checks it (the guest checkpoints' retention) never both win.
        """
        def mutate(header):
            v = header.version(number)
            if v.state in (image_mod.OBSOLETE, image_mod.FAILED):
                raise exception.VersionNotStable(header.id, number, v.state)
            v.made_by = made_by
        self.update_header(self.image(ref).id, mutate)

    def update_record(self, name, decode, mutate, what):
        """Compare-and-set of any record kept beside the image headers
        (a name with a dot is never an image): ``decode(bytes or None)``
        gives an object with ``to_bytes()``, ``mutate`` changes it (see
        update_header). Returns ``(object, mutate's result)``.
        """
        for attempt in range(CAS_TRIES):
            found = self.backend.read_header(name)
            data, token = found if found is not None else (None, None)
            record = decode(data)
            result = mutate(record)
            try:
                self.backend.write_header(name, record.to_bytes(), token)
                self.cas_writes += 1
                crashpoint.reached('header')
                return record, result
            except exception.Conflict:
                self.cas_conflicts += 1
                time.sleep(random.uniform(0, 0.002 * (attempt + 1)))
        raise exception.Conflict('%s keeps changing; gave up after %d tries'
                                 % (what, CAS_TRIES))

    def create_record(self, name, data):
        """Write a record beside the image headers once: Conflict if it
        exists.
        """
        self.backend.write_header(name, data, None)
        self.cas_writes += 1
        crashpoint.reached('header')

    def add_keys(self, name, entries):
        """Add to the key set of record ``name`` (backends/base.py): no
        compare-and-set, so never a conflict.
        """
        self.backend.add_keys(name, entries)
        self.key_writes += 1
        crashpoint.reached('header')

    def image(self, ref):
        """The header of an image named by id or by (unique) name."""
        if not isinstance(ref, str) or not ref:
            raise exception.InvalidInput('an image id or name is needed')
        try:
            header, _ = self._read(ref)
            if not header.deleted:
                return header
        except (exception.ImageNotFound, exception.InvalidInput):
            pass
        matches = [h for h in self.images() if h.name == ref]
        if not matches:
            raise exception.ImageNotFound(ref)
        if len(matches) > 1:
            raise exception.AmbiguousImage(ref, [h.id for h in matches])
        return matches[0]

    def images(self, include_deleted=False):
        result = []
        for image_id in self.backend.list_headers():
            if '.' in image_id:
                continue        # a record beside the images (groups.py)
            try:
                header, _ = self._read(image_id)
            except exception.ImageNotFound:
                continue  # deleted while we listed
            if include_deleted or not header.deleted:
                result.append(header)
        return sorted(result, key=lambda h: (h.created, h.id))
