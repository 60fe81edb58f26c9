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

"""Global checkpoints: versions of many images taken as one group.

All ranks of a job checkpoint with one group id and the number of
members. A group id is scoped by project: ``job-1`` of one project and
``job-1`` of another are two groups, and a guest can neither join nor
see a group of a project that is not its own (the guest endpoint takes
the project from the instance's binding or its Nova domain metadata;
operators name it). Callers with no project share one scope of their
own, apart from every project's.

Each group has an index beside the image headers (``group.`` and a
digest of project and id), so that a poll reads the index and the
members' headers, not every header of the repository. Its record, made
once by the first member (an exclusive create: a second creator finds
it and checks its count), holds the member count, project and creator;
its members are keys of the record's key set (backends/base.py), one
per image with the time it joined, added without compare-and-set: 16
hosts joining at once write 16 times, not up to 16 times each behind
one another's conflicts (issue 36). Indexes written before keep their
image list in the record, read together with the keys. The tag on each
member version (``{"id", "members", "project"}`` in its image header)
stays the truth for states: a group is complete when every member's
newest version in it is stable; a restart takes the newest complete
group.

A checkpoint tags its version in the header write that registers it;
the index lists the image before that (a direct caller) or after the
ack (manager/tagger.py). Either order is safe: a group is complete only
when its index lists ``members`` images, each with a stable tagged
version, so a crash in between leaves a member missing (the group is
incomplete, never wrongly complete).

Groups are shared by guests of one project, so what a guest learns is
kept small: a refusal does not say the group's member count, and
``guest_view`` is all a member sees (counts, no other member's name or
id). Operators get everything from ``state``.
"""

import json
import re
import time

from blobcr_agent.repository import image as image_mod
from blobcr_agent.repository import records
from blobcr_common import auth
from blobcr_common import exception

GROUP_ID = re.compile(r'^[A-Za-z0-9_.-]{1,64}$')
MAX_MEMBERS = 100000
RECORD_PREFIX = 'group.'
# A project's guest-made groups (issue 54, finding 3): one record per
# project, so that a cap on them costs one read, not a listing.
PROJECT_PREFIX = 'groups-of.'
# A group is forgotten to make room only once its record (or its entry
# here) is this old: its members' tags follow their ack (tagger.py).
RECLAIM_AFTER = 60.0
RECLAIM_TRIES = 32      # groups looked at per refusal


def check(group, members):
    if not isinstance(group, str) or not GROUP_ID.match(group):
        raise exception.InvalidInput('group: 1-64 letters, digits, . _ -')
    if type(members) is not int or not 1 <= members <= MAX_MEMBERS:
        raise exception.InvalidInput('members: a number from 1 to %d'
                                     % MAX_MEMBERS)


def record_name(group, project=None):
    """The name of a group's index record (the digest keeps names of
    any project and id apart and within the backend's name rules).
    """
    return records.digest_name(RECORD_PREFIX, [project, group])


class GroupIndex(object):
    """A group's index record: what the group is and who is in it."""

    def __init__(self, group, project, members=0, creator=None,
                 created=None, updated=None, images=()):
        self.group = group
        self.project = project
        self.members = members
        self.creator = creator
        self.created = created
        self.updated = updated
        self.images = list(images)

    @classmethod
    def decoder(cls, group, project):
        """``decode`` for Repository.update_record: None is a new group."""
        def decode(data):
            if data is None:
                return cls(group, project)
            try:
                raw = json.loads(data)
                found = cls(raw['group'], raw.get('project'),
                            raw['members'], raw.get('creator'),
                            raw.get('created'), raw.get('updated'),
                            raw['images'])
            except (ValueError, KeyError, TypeError) as e:
                raise exception.CorruptObject(
                    'group index', record_name(group, project), str(e))
            if (found.group, found.project) != (group, project):
                raise exception.CorruptObject(
                    'group index', record_name(group, project),
                    'it belongs to another group')
            return found
        return decode

    def to_bytes(self):
        return json.dumps({'group': self.group, 'project': self.project,
                           'members': self.members,
                           'creator': self.creator,
                           'created': self.created,
                           'updated': self.updated,
                           'images': self.images},
                          sort_keys=True).encode()


def _read_index(repo, group, project):
    name = record_name(group, project)
    found = repo.backend.read_header(name)
    if found is None:
        return None
    index = GroupIndex.decoder(group, project)(found[0])
    keys = repo.backend.read_keys(name)
    for image_id, joined in sorted(keys.items(), key=lambda kv: kv[1]):
        if image_id not in index.images:
            index.images.append(image_id)
        try:
            index.updated = max(index.updated or 0, float(joined))
        except ValueError:
            raise exception.CorruptObject('group index', name,
                                          'bad join time of %s' % image_id)
    return index


def _refuse_count(index, group, members):
    if index is not None and index.members and index.members != members:
        # Not the group's count: a guest must not learn it from here.
        raise exception.InvalidInput(
            'members: %d does not match the member count of group %s'
            % (members, group))


def admit(repo, group, members, project=None, known=None, declare=False):
    """Refuse a member count that disagrees with the group's: checked
    before the checkpoint is taken, so that a refusal commits nothing.
    Returns the index as read (None: a new group, or not read).

    ``known``: ``{(group, project): members}`` of indexes read before
    (a caller's cache). The first member sets the count and it never
    changes, so a count found there is admitted without reading the
    index again: on a busy store that read waited behind the persists
    of every member's host (issue 36). With ``declare`` (a coordinator
    that knows the count: the Cinder driver's phase zero), a group not
    made yet is remembered with ``members`` too; a member that made it
    meanwhile with another count is refused when the index is joined.
    """
    check(group, members)
    auth.check_project(project)
    if known is not None and known.get((group, project)) == members:
        return None
    index = _read_index(repo, group, project)
    _refuse_count(index, group, members)
    if known is not None and index is not None and index.members:
        known[(group, project)] = index.members
    elif known is not None and declare:
        known[(group, project)] = members
    return index


def project_record_name(project):
    return records.digest_name(PROJECT_PREFIX, project)


class ProjectGroups(records.ProjectRecord):
    """The groups guests of one project made: ``{index record name:
    [group id, when]}``.
    """

    PREFIX = PROJECT_PREFIX
    FIELD = 'groups'
    WHAT = 'project groups'

    @property
    def groups(self):
        return self.entries


def count_new(repo, group, project, cap):
    """A guest names ``group``, new (no index yet): count it in its
    project's record, or refuse it (OverBudget) when the project has
    ``cap`` groups already and none of them can be forgotten (see
    :func:`reclaim`). Before the checkpoint: a refusal takes nothing.
    Returns whether it was counted now.
    """
    name = record_name(group, project)
    found = repo.backend.read_header(project_record_name(project))
    if found is not None and \
            name in ProjectGroups.decoder(project)(found[0]).groups:
        return False        # counted already: no write

    def mutate(record):
        if name in record.groups:
            return False
        if cap and len(record.groups) >= cap:
            raise exception.OverBudget(
                'project %s has %d groups, at most %d: group %s is not '
                'made (reuse a group id, or let old groups\' checkpoints '
                'go)' % (project, len(record.groups), cap, group),
                'groups', {'groups': len(record.groups)},
                {'groups': cap})
        record.groups[name] = [group, time.time()]
        return True
    update = (lambda: repo.update_record(
        project_record_name(project), ProjectGroups.decoder(project),
        mutate, 'groups of project %s' % project)[1])
    try:
        return update()
    except exception.OverBudget:
        if not reclaim(repo, project):
            raise
    return update()


def _alive(repo, index):
    """Whether a member of the group still has a version in it."""
    for image_id in index.images:
        try:
            header, _ = repo._read(image_id)
        except exception.ImageNotFound:
            continue
        if header.deleted:
            continue
        if any(_in_group(v, index.group, index.project) and
               v.state in (image_mod.PENDING, image_mod.STABLE)
               for v in header.versions):
            return True
    return False


def reclaim(repo, project, now=None):
    """Forget the oldest groups of ``project``'s record none of whose
    members has a version in them any more (retention obsoleted them,
    GC freed them), and delete their index records: how many.
    """
    now = time.time() if now is None else now
    found = repo.backend.read_header(project_record_name(project))
    record = ProjectGroups.decoder(project)(found[0] if found else None)
    dead = []
    oldest = sorted(record.groups.items(), key=lambda kv: kv[1][1])
    for name, (group, made) in oldest[:RECLAIM_TRIES]:
        if now - made < RECLAIM_AFTER:
            break
        index = _read_index(repo, group, project)
        if index is not None and (
                now - (index.updated or 0) < RECLAIM_AFTER or
                _alive(repo, index)):
            continue
        dead.append(name)
    if not dead:
        return 0

    def forget(record):
        for name in dead:
            record.groups.pop(name, None)
    repo.update_record(project_record_name(project),
                       ProjectGroups.decoder(project), forget,
                       'groups of project %s' % project)
    for name in dead:
        found = repo.backend.read_header(name)
        if found is not None:
            try:
                repo.backend.delete_header(name, found[1])
            except exception.Conflict:
                pass            # written meanwhile: it stays, uncounted
    return len(dead)


def project_groups(repo, project):
    """How many groups ``project``'s record counts."""
    found = repo.backend.read_header(project_record_name(project))
    return len(ProjectGroups.decoder(project)(
        found[0] if found else None).groups)


def member_tag(group, members, project=None):
    """The tag a member version carries (Version.group)."""
    return {'id': group, 'members': members, 'project': project}


def join(repo, image_ids, group, members, project=None, creator=None,
         index=None, made=False):
    """List ``image_ids`` in the group's index (made by the first member;
    ``creator`` says who, for operators): before any of their versions
    is tagged. ``index``, as :func:`admit` read it, saves the writes
    when it lists them all already (a coordinator listed every member
    first, or a retry), and the create when it exists; so does
    ``made``: this caller joined the index before, with this count.
    """
    if index is not None and index.members == members and \
            set(image_ids) <= set(index.images):
        return
    if not made and (index is None or not index.members):
        _make_index(repo, group, project, members, creator)
    now = ('%.6f' % time.time()).encode()
    repo.add_keys(record_name(group, project),
                  {image_id: now for image_id in image_ids})


def _make_index(repo, group, project, members, creator):
    """Create the group's record with ``members``; if another member
    made it first, check that its count is ours.
    """
    now = time.time()
    made = GroupIndex(group, project, members, creator, now, now)
    try:
        repo.create_record(record_name(group, project), made.to_bytes())
    except exception.Conflict:
        _refuse_count(_read_index(repo, group, project), group, members)


def tag(repo, image, number, group, members, project=None, creator=None):
    """Record that version ``number`` of ``image`` belongs to ``group``
    of ``project``: in the group's index (made by the first member;
    ``creator`` says who, for operators), then on the version.
    """
    tag_many(repo, [(repo.image(image).id, number)], group, members,
             project=project, creator=creator)


def tag_many(repo, versions, group, members, project=None, creator=None):
    """:func:`tag` for several ``(image id, number)`` at once: one
    compare-and-set of the group's index for all of them (the members
    of one host), then each version's.
    """
    check(group, members)
    auth.check_project(project)
    join(repo, [image_id for image_id, _ in versions], group, members,
         project, creator)
    for image_id, number in versions:
        def mutate(header, number=number):
            header.version(number).group = member_tag(group, members,
                                                      project)
        repo.update_header(image_id, mutate)


def _in_group(version, group, project):
    return same_group(version.group, member_tag(group, 0, project))


def same_group(tag, other):
    """Whether two member tags name the same group (of one project)."""
    return bool(tag) and bool(other) and tag['id'] == other['id'] and \
        tag.get('project') == other.get('project')


def state(repo, group, project=None):
    """``{"group", "project", "members", "creator", "versions": {image
    id: {"image", "name", "version", "state", "created"}}, "complete"}``
    for operators; the newest version per member image counts. Keyed by
    image id: names are not unique.
    """
    auth.check_project(project)
    index = _read_index(repo, group, project)
    versions = {}
    for image_id in index.images if index else ():
        try:
            header, _ = repo._read(image_id)     # by id: no name search
        except exception.ImageNotFound:
            continue
        if header.deleted:
            continue                    # a member deleted since
        tagged = [v for v in header.versions
                  if _in_group(v, group, project)]
        if tagged:
            v = max(tagged, key=lambda v: v.number)
            versions[header.id] = {'image': header.id, 'name': header.name,
                                   'version': v.number, 'state': v.state,
                                   'created': v.created}
    members = index.members if index else 0
    return {'group': group, 'project': project, 'members': members,
            'creator': index.creator if index else None,
            'versions': versions,
            'complete': bool(versions) and len(versions) == members and
            all(v['state'] == image_mod.STABLE for v in versions.values())}


def guest_view(found, image):
    """What the guest of ``image`` may see of a group (``found``, from
    ``state``): ``{"group", "members", "stable", "complete"}``, or None
    when ``image`` is not a member. ``stable`` counts the members whose
    newest version is stable; nothing names the other members.
    """
    versions = found.get('versions') or {}
    if not any(v.get('image') == image for v in versions.values()):
        return None
    return {'group': found['group'], 'members': found['members'],
            'stable': sum(1 for v in versions.values()
                          if v.get('state') == image_mod.STABLE),
            'complete': bool(found['complete'])}


def indexes(repo, project=None):
    """The index records of ``project``'s groups (no image header is
    read), newest member first.
    """
    found = []
    for name in repo.backend.list_headers():
        if not name.startswith(RECORD_PREFIX):
            continue
        record = repo.backend.read_header(name)
        if record is None:
            continue                    # removed while we listed
        try:
            raw = json.loads(record[0])
            index = GroupIndex.decoder(raw['group'],
                                       raw.get('project'))(record[0])
        except (ValueError, KeyError, TypeError,
                exception.CorruptObject):
            continue                    # not ours to judge here
        if index.project == project:
            found.append(index)
    return sorted(found, key=lambda i: i.updated or 0, reverse=True)


def newest_complete(repo, prefix='', project=None):
    """The id of the newest complete group of ``project`` whose id
    starts with ``prefix``, or None: where a restart of the job begins.
    """
    auth.check_project(project)
    for index in indexes(repo, project):
        if index.group.startswith(prefix) and \
                state(repo, index.group, project)['complete']:
            return index.group
    return None
