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

"""The OSC plugin's commands on osc-lib's fakes (its FakeApp and
FakeClientManager, what OpenStackClient's own unit tests use): parsers,
filters passed to the block-storage client, typed columns, the API
version option. The client is a fake of openstacksdk's block-storage
proxy holding Cinder-shaped records; the integration tests
(test_cinder_driver.py, test_restart.py) run the same commands through
the real CLI against real Cinder.
"""

import argparse
import types

from osc_lib import exceptions
from osc_lib.test import fakes
import pytest

from blobcrclient.osc import checkpoint
from blobcrclient.osc import plugin
from blobcrclient.osc import restart as nova_osc


def snapshot(id, volume_id, version=None, status='available', **meta):
    metadata = {'other': 'x'}
    if version is not None:
        metadata.update({'blobcr:version': str(version),
                         'blobcr:parent': str(version - 1),
                         'blobcr:bytes_written': '262144',
                         'blobcr:ack_ms': '1.5', 'blobcr:held_ms': '0.25'})
    metadata.update({'blobcr:' + k: v for k, v in meta.items()})
    return types.SimpleNamespace(id=id, name='n-' + id, status=status,
                                 size=1, created_at='2026-11-26T00:00:00',
                                 volume_id=volume_id, metadata=metadata)


class FakeBlockStorage(object):
    """openstacksdk's block-storage proxy, as far as the commands use it;
    it records the filters each listing was asked with.
    """

    def __init__(self, snapshots, volumes):
        self._snapshots = snapshots
        self._volumes = volumes
        self.asked = []

    def snapshots(self, details=True, **filters):
        self.asked.append(filters)
        return iter([s for s in self._snapshots
                     if all(getattr(s, k) == v for k, v in filters.items())])

    def volumes(self, details=True):
        return iter(self._volumes)

    def find_volume(self, name_or_id, ignore_missing=True):
        for v in self._volumes:
            if name_or_id in (v.id, v.name):
                return v
        raise exceptions.NotFound(404)

    def find_snapshot(self, name_or_id, ignore_missing=True):
        for s in self._snapshots:
            if name_or_id in (s.id, s.name):
                return s
        raise exceptions.NotFound(404)


def volume(id):
    return types.SimpleNamespace(id=id, name='vol-' + id, status='in-use',
                                 size=1, created_at='', snapshot_id=None,
                                 source_volume_id=None)


@pytest.fixture
def client():
    return FakeBlockStorage(
        [snapshot('s3', 'a', 3), snapshot('s2', 'a', 2),
         snapshot('pending', 'a', status='creating'),
         snapshot('b2', 'b', 2), snapshot('lvm', 'c')],
        [volume('a'), volume('b'), volume('c')])


@pytest.fixture
def app(client):
    app = fakes.FakeApp(fakes.FakeStdout(), fakes.FakeLog())
    app.client_manager = fakes.FakeClientManager()
    app.client_manager.blobcr = client
    return app


def run(command, app, argv):
    cmd = command(app, None)
    parsed = cmd.get_parser('openstack blobcr').parse_args(argv)
    return parsed, cmd.take_action(parsed)


def rows_of(columns, rows):
    return [dict(zip(columns, row)) for row in rows]


def test_list_of_one_volume_by_name_filters_in_the_api(app, client):
    parsed, (columns, rows) = run(checkpoint.ListCheckpoint, app,
                                  ['--volume', 'vol-a'])
    assert parsed.volume == 'vol-a'
    assert client.asked == [{'volume_id': 'a'}]
    listed = rows_of(columns, rows)
    # Oldest version first; the checkpoint being made (no metadata yet)
    # is shown for its volume, last.
    assert [r['ID'] for r in listed] == ['s2', 's3', 'pending']
    first = listed[0]
    assert (first['Version'], first['Parent'], first['Bytes Written'],
            first['Ack ms'], first['Held ms']) == (2, 1, 262144, 1.5, 0.25)
    assert type(first['Version']) is int and type(first['Ack ms']) is float
    assert listed[2]['Version'] is None
    assert {r['Volume ID'] for r in listed} == {'a'}


def test_list_of_everything_shows_only_blobcr_checkpoints(app, client):
    _, (columns, rows) = run(checkpoint.ListCheckpoint, app, [])
    assert client.asked == [{}]
    listed = rows_of(columns, rows)
    assert sorted((r['Volume ID'], r['ID']) for r in listed) == [
        ('a', 's2'), ('a', 's3'), ('b', 'b2')]


def test_list_status_filter_and_the_positional_volume(app, client):
    run(checkpoint.ListCheckpoint, app, ['--status', 'creating', 'a'])
    assert client.asked == [{'status': 'creating', 'volume_id': 'a'}]


def test_list_of_an_unknown_volume_fails(app):
    with pytest.raises(exceptions.NotFound):
        run(checkpoint.ListCheckpoint, app, ['--volume', 'nope'])


def test_show_gives_numbers_and_where(app):
    _, (columns, row) = run(checkpoint.ShowCheckpoint, app, ['n-s3'])
    shown = dict(zip(columns, row))
    assert shown['Version'] == 3 and shown['Parent'] == 2
    assert shown['Volume ID'] == 'a'


def test_api_version_option_and_env(monkeypatch):
    monkeypatch.setenv('OS_BLOBCR_API_VERSION', '7')
    parser = plugin.build_option_parser(argparse.ArgumentParser())
    assert parser.parse_args([]).os_blobcr_api_version == '7'
    assert parser.parse_args(['--os-blobcr-api-version', '1']) \
        .os_blobcr_api_version == '1'
    manager = fakes.FakeClientManager()
    manager._api_version = {'blobcr': '1'}
    assert plugin.make_client(manager) is \
        manager.sdk_connection.block_storage
    manager._api_version = {'blobcr': '7'}
    with pytest.raises(exceptions.UnsupportedVersion, match='7'):
        plugin.make_client(manager)


def test_group_restart_takes_the_group_as_its_object(app):
    cmd = nova_osc.RestartGroup(app, None)
    parsed = cmd.get_parser('openstack blobcr group restart').parse_args(
        ['g-1', '--dry-run'])
    assert parsed.group == 'g-1' and parsed.dry_run
    old = nova_osc.RestartJob(app, None)
    assert old.deprecated
    parser = old.get_parser('openstack blobcr restart')
    assert parser.parse_args(['--group', 'g-1']).group == 'g-1'
    with pytest.raises(SystemExit):
        parser.parse_args(['g-1'])
