"""Every option has help text and the committed sample file is current."""

import os
import subprocess
import sys

from blobcr_agent import conf

TOP = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def test_every_option_has_help():
    for group, opts in conf.list_opts():
        for opt in opts:
            assert opt.help and len(opt.help) > 20, (group, opt.name)


def test_sample_config_is_up_to_date(tmp_path):
    out = tmp_path / 'sample.conf'
    subprocess.run(
        [sys.executable, '-m', 'oslo_config.generator', '--config-file',
         os.path.join(TOP, 'etc/blobcr/blobcr-config-generator.conf'),
         '--output-file', str(out)], check=True, cwd=TOP)
    with open(os.path.join(TOP, 'etc/blobcr/blobcr.conf.sample')) as f:
        assert out.read_text() == f.read(), 'run: tox -e genconfig'
