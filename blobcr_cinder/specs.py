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

"""What a volume type's ``blobcr:`` extra specs and a snapshot's
``blobcr:`` properties ask of the driver; unknown keys or values are
refused, never ignored.
"""

from cinder import exception
from cinder.i18n import _
from oslo_utils import strutils

from blobcr_cinder import options
from blobcr_common import rpc

EXTRA_SPEC_PREFIX = 'blobcr:'
EXTRA_SPECS = {'quiesce': options.QUIESCE_MODES,
               'durability': rpc.DURABILITIES}
# Snapshot properties (metadata) the driver reads and writes.
META = 'blobcr:'
# Cinder's extra spec for volumes attached to several servers at once.
MULTIATTACH_SPEC = 'multiattach'


def extra_specs(volume_type):
    """A volume type's extra specs: the type is an object on a volume,
    a dict where Cinder passes one (retype's new type).
    """
    if not volume_type:
        return {}
    if isinstance(volume_type, dict):
        return volume_type.get('extra_specs') or {}
    return volume_type.extra_specs or {}


def checked(volume_type):
    """A volume type's extra specs, its ``blobcr:`` ones checked:
    InvalidVolumeType for an unknown ``blobcr:`` extra spec or value, or
    for a multiattach type (refuse_multiattach).
    """
    specs = extra_specs(volume_type)
    refuse_multiattach(specs)
    for key, value in specs.items():
        if not key.startswith(EXTRA_SPEC_PREFIX):
            continue
        name = key[len(EXTRA_SPEC_PREFIX):]
        if name not in EXTRA_SPECS:
            raise exception.InvalidVolumeType(
                reason=_('unknown extra spec %(key)s (BlobCR knows '
                         '%(known)s)')
                % {'key': key, 'known': ', '.join(
                    EXTRA_SPEC_PREFIX + k for k in sorted(EXTRA_SPECS))})
        if value not in EXTRA_SPECS[name]:
            raise exception.InvalidVolumeType(
                reason=_('%(key)s=%(value)s: must be one of %(known)s')
                % {'key': key, 'value': value,
                   'known': ', '.join(EXTRA_SPECS[name])})
    return specs


def refuse_multiattach(specs):
    """InvalidVolumeType for extra specs that ask for multiattach
    (Cinder's ``multiattach="<is> True"``). A BlobCR image is mirrored
    by one host's agent, bound to one instance; the backends report
    ``multiattach`` False, so Cinder's scheduler (CapabilitiesFilter)
    places no such volume on them. This says why where no scheduler
    filter did: at create, retype and attach (every path that reads the
    type's specs through checked()).
    """
    value = str(specs.get(MULTIATTACH_SPEC, '')).strip()
    if value.startswith('<is>') and strutils.bool_from_string(
            value[len('<is>'):].strip()):
        raise exception.InvalidVolumeType(
            reason=_('BlobCR volumes are not multi-attach: a BlobCR image '
                     'is mirrored on one host for one server at a time; '
                     'choose a volume type without multiattach="<is> '
                     'True"'))


def quiesce_of(volume_type, default):
    """The quiesce mode a volume type asks for; InvalidVolumeType for an
    unknown ``blobcr:`` extra spec or value.
    """
    return checked(volume_type).get(EXTRA_SPEC_PREFIX + 'quiesce', default)


def durability_of(volume_type):
    """The durability a volume type asks for (``blobcr:durability``), or
    None: the agent's ``[agent] durability``. InvalidVolumeType for an
    unknown ``blobcr:`` extra spec or value; whether the store can keep
    ``cluster`` (not the local store) only the agent knows, at attach.
    """
    return checked(volume_type).get(EXTRA_SPEC_PREFIX + 'durability')


def refuse_encrypted(volume=None, new_type_diff=None):
    """InvalidVolumeType for an encrypted volume (its type has an
    encryption spec: Cinder gave it a key) or a retype that adds or
    changes encryption. BlobCR images are not encrypted, and os-brick's
    LUKS encryptor would replace the agent's device link with a
    dm-crypt one: refused until encryption is supported and tested.
    """
    if (volume is not None and getattr(volume, 'encryption_key_id', None)) \
            or (new_type_diff or {}).get('encryption'):
        raise exception.InvalidVolumeType(
            reason=_('BlobCR does not support encrypted volume types yet: '
                     'choose a type without an encryption spec'))


def quiesce_asked(snapshot):
    """The quiesce mode a snapshot's own ``blobcr:quiesce`` property
    asks for (``openstack volume snapshot create --property ...``), or
    None; InvalidSnapshot for an unknown mode.
    """
    mode = (snapshot.metadata or {}).get(META + 'quiesce')
    if mode is not None and mode not in options.QUIESCE_MODES:
        raise exception.InvalidSnapshot(
            reason=_('%(meta)squiesce=%(mode)s: must be one of %(known)s')
            % {'meta': META, 'mode': mode,
               'known': ', '.join(options.QUIESCE_MODES)})
    return mode
