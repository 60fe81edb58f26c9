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

"""Restart profiles: the order in which a version's chunks were first
read after an attach, stored as one content-addressed object whose name
the version records; a restart from the version (or from a clone of it)
prefetches in that order.
"""

import array
import hashlib
import zlib

from blobcr_agent.repository.backends import base
from blobcr_common import exception


class Profiles(object):
    """Save and load restart profiles (a mixin of
    :class:`~blobcr_agent.repository.repository.Repository`).
    """

    def save_profile(self, ref, number, order):
        """Store the order in which chunks of version ``number`` were
        first read after an attach; restarts from it prefetch that way.
        """
        image_id = self.image(ref).id
        blob = zlib.compress(array.array('I', order).tobytes())
        name = hashlib.sha256(blob).hexdigest()
        batch = self.backend.batch()
        batch.put(base.CHUNK, name, blob)
        batch.wait()

        def mutate(header):
            header.version(number).profile = name
        self.update_header(image_id, mutate)
        return name

    def load_profile(self, header, number):
        """The read order recorded for a version, or for the version it
        was cloned from; [] if none.
        """
        v = header.version(number)
        if not v.profile and number == 1 and header.origin:
            try:
                source = self.image(header.origin['image'])
                return self.load_profile(source, header.origin['version'])
            except exception.BlobCRError:
                return []
        if not v.profile:
            return []
        blob = self.backend.get(base.CHUNK, v.profile)
        if hashlib.sha256(blob).hexdigest() != v.profile:
            raise exception.CorruptObject(base.CHUNK, v.profile,
                                          'profile does not match its hash')
        order = array.array('I')
        order.frombytes(zlib.decompress(blob))
        return [i for i in order if i < header.nchunks]
