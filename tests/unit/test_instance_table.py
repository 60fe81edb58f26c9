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

"""The instance table: several images per instance (a boot volume and
data volumes), in attach order, kept across restarts; the tables of
earlier releases still read.
"""

import json

import pytest

from blobcr_agent import instances
from blobcr_common import exception


def test_an_instance_uses_several_images_in_attach_order(tmp_path):
    path = str(tmp_path / 'instances.json')
    table = instances.InstanceTable(path)
    table.bind('vm', 'boot', 'proj')
    table.bind('vm', 'data')
    table.bind('vm', 'boot')                 # again: no duplicate
    table.bind('other', 'data2', None)
    assert table.images_of('vm') == ['boot', 'data']
    assert table.project_of('vm') == 'proj'  # kept when none is given
    assert table.instances_of('data') == ['vm']
    # Kept across a restart of the agent.
    again = instances.InstanceTable(path)
    assert again.images_of('vm') == ['boot', 'data']
    # A detach unbinds that image alone; the last one, the instance.
    again.unbind_image('boot')
    assert again.images_of('vm') == ['data']
    again.unbind_image('data')
    assert again.images_of('vm') == [] and again.project_of('vm') is None
    assert instances.InstanceTable(path).images_of('other') == ['data2']


def test_tables_of_earlier_releases_read_as_one_image(tmp_path):
    path = tmp_path / 'instances.json'
    path.write_text(json.dumps({'old': 'img-1',
                                'newer': {'image': 'img-2',
                                          'project': 'p'}}))
    table = instances.InstanceTable(str(path))
    assert table.images_of('old') == ['img-1']
    assert table.images_of('newer') == ['img-2']
    assert table.project_of('newer') == 'p'
    table.bind('newer', 'img-3')
    assert instances.InstanceTable(str(path)).images_of('newer') == [
        'img-2', 'img-3']


@pytest.mark.parametrize('bad', ['', 'x' * 65, None, 7])
def test_an_instance_id_is_checked(tmp_path, bad):
    table = instances.InstanceTable(str(tmp_path / 'instances.json'))
    with pytest.raises(exception.InvalidInput):
        table.bind(bad, 'img')
