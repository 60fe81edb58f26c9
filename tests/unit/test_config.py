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

"""Every option has help text and the committed sample file is current."""

import os
import subprocess
import sys

import pytest

from blobcr_agent import conf
from blobcr_cinder import options as cinder_options
from blobcr_nova import conf as nova_conf
from blobcr_nova import listener_opts

TOP = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


@pytest.mark.parametrize('list_opts', [
    conf.list_opts, cinder_options.list_opts,
    lambda: [(cinder_options.SYNC_GROUP, cinder_options.sync_opts)],
    lambda: [(nova_conf.vendordata_group, nova_conf.vendordata_opts)],
    lambda: [(listener_opts.listener_group, listener_opts.listener_opts)]])
def test_every_option_has_help(list_opts):
    for group, opts in list_opts():
        for opt in opts:
            assert opt.help and len(opt.help) > 20, (group, opt.name)


@pytest.mark.parametrize('generator,sample', [
    ('blobcr-config-generator.conf', 'blobcr.conf.sample'),
    ('cinder-blobcr-config-generator.conf', 'cinder-blobcr.conf.sample'),
    ('blobcr-cinder-sync-config-generator.conf',
     'blobcr-cinder-sync.conf.sample'),
    ('nova-vendordata-config-generator.conf', 'nova-vendordata.conf.sample'),
    ('nova-listener-config-generator.conf', 'nova-listener.conf.sample')])
def test_sample_config_is_up_to_date(tmp_path, generator, sample):
    out = tmp_path / 'sample.conf'
    subprocess.run(
        [sys.executable, '-m', 'oslo_config.generator', '--config-file',
         os.path.join(TOP, 'etc/blobcr', generator),
         '--output-file', str(out)], check=True, cwd=TOP)
    with open(os.path.join(TOP, 'etc/blobcr', sample)) as f:
        assert out.read_text() == f.read(), 'run: tox -e genconfig'
