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

"""A project's guest checkpoints as each host last counted them (issue
54, finding 3): the per-project budget (manager/budget.py) counts the
project's images on every host, not only this one's.

One record per project beside the image headers (``usage-of.`` and a
digest of the project), ``{"project", "hosts": {host: {"versions",
"bytes", "at"}}}``: each agent writes its own entry (its live count of
the project's images attached there, and when) by compare-and-set, and
reads the others' from the same record: one read for all hosts, never
a listing. An entry not written for STALE seconds (its agent stopped,
or lost the store) counts no more, and the next writer drops it; an
agent whose last image of the project is detached drops its own.
"""

import time

from blobcr_agent.repository import records
from blobcr_common import exception

PREFIX = 'usage-of.'
# An entry older than this counts for nothing: its agent republishes
# every HEARTBEAT seconds (manager/budget.py) while it has the
# project's images attached, so only an agent gone (or cut off from the
# store) for ten of them stops counting. Compared with the reader's
# clock: hosts' clocks must agree to well within it.
STALE = 600.0


def record_name(project):
    return records.digest_name(PREFIX, project)


class ProjectUsage(records.ProjectRecord):
    """``hosts``: host -> ``{"versions", "bytes", "at"}``."""

    PREFIX = PREFIX
    FIELD = 'hosts'
    WHAT = 'project usage'

    @staticmethod
    def check_entry(entry):
        int(entry['versions']), int(entry['bytes']), float(entry['at'])

    @property
    def hosts(self):
        return self.entries

    def others(self, host, now=None):
        """``{"versions", "bytes", "hosts"}``: the sum of the entries of
        hosts other than ``host`` written in the last STALE seconds.
        """
        now = time.time() if now is None else now
        total = {'versions': 0, 'bytes': 0, 'hosts': 0}
        for name, entry in self.hosts.items():
            if name == host or now - entry['at'] > STALE:
                continue
            total['versions'] += int(entry['versions'])
            total['bytes'] += int(entry['bytes'])
            total['hosts'] += 1
        return total


def read(repo, project):
    found = repo.backend.read_header(record_name(project))
    return ProjectUsage.decoder(project)(found[0] if found else None)


def publish(repo, project, host, usage, now=None):
    """Write ``host``'s entry (``usage``: ``{"versions", "bytes"}``;
    None drops it) and drop the stale ones. Returns the record as
    written: the other hosts' entries come with it.
    """
    def mutate(record):
        at = time.time() if now is None else now
        for name in [n for n, e in record.hosts.items()
                     if at - e['at'] > STALE]:
            del record.hosts[name]
        if usage is None:
            record.hosts.pop(host, None)
        else:
            record.hosts[host] = {'versions': usage['versions'],
                                  'bytes': usage['bytes'], 'at': at}
    if usage is None:
        found = repo.backend.read_header(record_name(project))
        if found is None:
            return ProjectUsage(project)
        record = ProjectUsage.decoder(project)(found[0])
        if host not in record.hosts:
            return record           # nothing of ours: no write
    record, _ = repo.update_record(record_name(project),
                                   ProjectUsage.decoder(project), mutate,
                                   'usage of project %s' % project)
    if not record.hosts:
        # The last host gone: the record goes too (a Conflict: someone
        # wrote meanwhile, and it stays).
        found = repo.backend.read_header(record_name(project))
        if found is not None and \
                not ProjectUsage.decoder(project)(found[0]).hosts:
            try:
                repo.backend.delete_header(record_name(project), found[1])
            except exception.Conflict:
                pass
    return record
