"""Global checkpoints: versions of many images taken as one group.

All ranks of a job checkpoint with one group id and the number of
members. The tag lives on each member version in its image header, so
the record is shared by every host of the job and survives agent
restarts. A group is complete when it has as many stable versions as it
has members; a restart takes the newest complete group.

Groups are shared by guests of different owners, so what a guest learns
is kept small: a refusal does not say the group's member count, and
``guest_view`` is all a member sees (counts, no other member's name or
id). Operators get everything from ``state``.
"""

import re

from blobcr_agent import exception
from blobcr_agent.repository import image as image_mod

GROUP_ID = re.compile(r'^[A-Za-z0-9_.-]{1,64}$')
MAX_MEMBERS = 100000


def check(group, members):
    if not isinstance(group, str) or not GROUP_ID.match(group):
        raise exception.InvalidInput('group: 1-64 letters, digits, . _ -')
    if type(members) is not int or not 1 <= members <= MAX_MEMBERS:
        raise exception.InvalidInput('members: a number from 1 to %d'
                                     % MAX_MEMBERS)


def admit(repo, group, members):
    """Refuse a member count that disagrees with the group's: checked
    before the checkpoint is taken, so that a refusal commits nothing.
    """
    check(group, members)
    known = state(repo, group)
    if known['versions'] and known['members'] != members:
        # Not the group's count: a guest must not learn it from here.
        raise exception.InvalidInput(
            'members: %d does not match the member count of group %s'
            % (members, group))


def tag(repo, image, number, group, members):
    """Record that version ``number`` of ``image`` belongs to ``group``."""
    check(group, members)

    def mutate(header):
        header.version(number).group = {'id': group, 'members': members}
    repo.update_header(repo.image(image).id, mutate)


def state(repo, group):
    """``{"group", "members", "versions": {image id: {"image", "name",
    "version", "state", "created"}}, "complete"}``, for operators; the
    newest version per image counts. Keyed by image id: names are not
    unique.
    """
    versions, members = {}, 0
    for header in repo.images():
        for v in header.versions:
            if v.group and v.group['id'] == group:
                members = v.group['members']
                versions[header.id] = {'image': header.id,
                                       'name': header.name,
                                       'version': v.number,
                                       'state': v.state,
                                       'created': v.created}
    return {'group': group, 'members': members, 'versions': versions,
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


def newest_complete(repo, prefix=''):
    """The id of the newest complete group whose id starts with
    ``prefix``, or None: where a restart of the job begins.
    """
    seen = {}
    for header in repo.images():
        for v in header.versions:
            if v.group and v.group['id'].startswith(prefix):
                seen[v.group['id']] = max(seen.get(v.group['id'], 0),
                                          v.created)
    for group in sorted(seen, key=seen.get, reverse=True):
        if state(repo, group)['complete']:
            return group
    return None
