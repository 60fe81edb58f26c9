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

"""Which instance uses which image on this host, and the instance's
project, kept across restarts.

Filled by attach calls that name an instance (Cinder, Nova, or
``blobcr-manage attach --instance [--project]``); the guest endpoint
asks it first and falls back to libvirt (a Nova domain's UUID is its
instance id, its metadata names the project). The project scopes the
instance's group checkpoints (repository/groups.py).

On disk: ``{instance: {"image": id, "project": id or null}}``; a table
of the previous release (``{instance: image id}``) is read as having no
projects.
"""

import json
import os
import threading

from blobcr_agent import exception


class InstanceTable(object):

    def __init__(self, path):
        self.path = path
        self._lock = threading.Lock()
        self._table = self._load()

    def _load(self):
        try:
            with open(self.path) as f:
                table = json.load(f)
        except FileNotFoundError:
            return {}
        except ValueError as e:
            raise exception.CorruptObject('instance table', self.path,
                                          str(e))
        if not isinstance(table, dict):
            raise exception.CorruptObject('instance table', self.path,
                                          'not a JSON object')
        return {instance: entry if isinstance(entry, dict)
                else {'image': entry, 'project': None}
                for instance, entry in table.items()}

    def _save(self):
        tmp = self.path + '.tmp'
        with open(tmp, 'w') as f:
            json.dump(self._table, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def bind(self, instance, image_id, project=None):
        """Bind ``instance`` to ``image_id``; a project given again
        replaces the one recorded, none keeps it.
        """
        if not isinstance(instance, str) or not 0 < len(instance) <= 64:
            raise exception.InvalidInput('an instance id is 1-64 characters')
        with self._lock:
            entry = self._table.get(instance)
            if entry is not None and entry['image'] != image_id:
                raise exception.InvalidInput(
                    'instance %s already uses image %s'
                    % (instance, entry['image']))
            if project is None and entry is not None:
                project = entry['project']
            self._table[instance] = {'image': image_id, 'project': project}
            self._save()

    def unbind_image(self, image_id):
        with self._lock:
            gone = [i for i, e in self._table.items()
                    if e['image'] == image_id]
            for instance in gone:
                del self._table[instance]
            if gone:
                self._save()

    def image_of(self, instance):
        with self._lock:
            return (self._table.get(instance) or {}).get('image')

    def project_of(self, instance):
        with self._lock:
            return (self._table.get(instance) or {}).get('project')

    def instances_of(self, image_id):
        with self._lock:
            return sorted(i for i, e in self._table.items()
                          if e['image'] == image_id)
