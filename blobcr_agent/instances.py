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

"""Which instance uses which images on this host, and the instance's
project, kept across restarts.

Filled by attach calls that name an instance (Cinder, Nova, or
``blobcr-manage attach --instance [--project]``); an instance may use
several images (a boot volume and data volumes), in the order they were
attached. The guest endpoint asks it first and falls back to libvirt (a
Nova domain's UUID is its instance id, its metadata names the project);
a guest's CHECKPOINT takes the instance's first image (its boot volume
when Nova attached it first). The project scopes the instance's group
checkpoints (repository/groups.py).

On disk: ``{instance: {"images": [id, ...], "project": id or null}}``;
tables of earlier releases (``{"image": id, ...}``, or ``{instance:
image id}`` with no projects) are read as one image.
"""

import threading

from blobcr_agent import jsonfile
from blobcr_common import exception


class InstanceTable(object):

    def __init__(self, path):
        self.path = path
        self._lock = threading.Lock()
        self._table = self._load()

    def _load(self):
        table = jsonfile.load(self.path, 'instance table')
        return {instance: self._entry(entry)
                for instance, entry in table.items()}

    @staticmethod
    def _entry(entry):
        if not isinstance(entry, dict):
            return {'images': [entry], 'project': None}
        if 'images' not in entry:
            return {'images': [entry['image']],
                    'project': entry.get('project')}
        return entry

    def _save(self):
        jsonfile.save(self.path, self._table)

    def bind(self, instance, image_id, project=None):
        """Add ``image_id`` to the images ``instance`` uses; a project
        given again replaces the one recorded, none keeps it.
        """
        check_instance(instance)
        with self._lock:
            entry = self._table.get(instance) or {'images': [],
                                                  'project': None}
            if project is None:
                project = entry['project']
            images = entry['images'] + (
                [] if image_id in entry['images'] else [image_id])
            self._table[instance] = {'images': images, 'project': project}
            self._save()

    def unbind_image(self, image_id):
        with self._lock:
            changed = False
            for instance, entry in list(self._table.items()):
                if image_id in entry['images']:
                    entry['images'].remove(image_id)
                    if not entry['images']:
                        del self._table[instance]
                    changed = True
            if changed:
                self._save()

    def images_of(self, instance):
        """The images ``instance`` uses here, in attach order."""
        with self._lock:
            return list((self._table.get(instance) or {}).get('images', []))

    def project_of(self, instance):
        with self._lock:
            return (self._table.get(instance) or {}).get('project')

    def instances_of(self, image_id):
        with self._lock:
            return sorted(i for i, e in self._table.items()
                          if image_id in e['images'])


def check_instance(instance):
    if not isinstance(instance, str) or not 0 < len(instance) <= 64:
        raise exception.InvalidInput('an instance id is 1-64 characters')
