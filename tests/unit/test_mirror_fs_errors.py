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

"""Every error of a versions/ request handler becomes an errno.

The real failures (a lost chunk, a corrupt header, an unmount) run on
real mounts in tests/functional/test_mirror_versions_faults.py. A bug
(an exception no code expects) cannot be provoked on the real
repository, so here a stand-in repository raises one.
"""

import errno
import inspect
import logging

import pyfuse3
import pytest
import trio

from blobcr_agent.mirror import fs
from blobcr_common import exception


class _Repository(object):
    def __init__(self, error):
        self.error = error

    def image(self, ref):
        raise self.error

    def images(self):
        raise self.error


class _Service(object):
    started_ns = 0
    attached = {}
    cache_dir = '/'

    def __init__(self, error):
        self.repo = _Repository(error)


def _errno_of(error, call):
    mirror = fs.MirrorFS(_Service(error), versions_only=True)
    with pytest.raises(pyfuse3.FUSEError) as raised:
        trio.run(call, mirror)
    return raised.value.errno


async def _lookup(mirror):
    await mirror.lookup(fs.ROOT, b'some-image')


async def _readdir(mirror):
    await mirror.readdir(fs.ROOT, 0, None)


@pytest.mark.parametrize('error, code', [
    (exception.ImageNotFound('x'), errno.ENOENT),
    (exception.ObjectNotFound('chunk', 'x'), errno.EIO),
    (exception.CorruptObject('header', 'x', 'bad'), errno.EIO),
    (exception.BackendUnavailable('down'), errno.EIO),
    (exception.BackendFull('full'), errno.ENOSPC),
    (OSError(errno.EACCES, 'denied'), errno.EACCES),
    (OSError('no errno'), errno.EIO),
    (KeyError('a bug'), errno.EIO),
    (pyfuse3.FUSEError(errno.ENOTDIR), errno.ENOTDIR),
])
@pytest.mark.parametrize('call', [_lookup, _readdir])
def test_handler_errors_become_errnos(error, code, call):
    assert _errno_of(error, call) == code


def test_an_unexpected_error_is_logged_with_its_traceback(caplog):
    with caplog.at_level(logging.WARNING, logger=fs.__name__):
        assert _errno_of(ZeroDivisionError('a bug'), _readdir) == errno.EIO
        assert _errno_of(exception.CorruptObject('header', 'h', 'bad'),
                         _readdir) == errno.EIO
    unexpected, expected = caplog.records
    assert unexpected.levelno == logging.ERROR
    assert 'ZeroDivisionError: a bug' in unexpected.exc_text
    assert 'readdir' in unexpected.getMessage()
    assert expected.levelno == logging.WARNING and not expected.exc_info
    assert 'header object h is corrupt' in expected.getMessage()


def test_every_handler_is_wrapped():
    handlers = [name for name, value in vars(fs.MirrorFS).items()
                if hasattr(pyfuse3.Operations, name)
                and inspect.iscoroutinefunction(value)]
    assert {'lookup', 'getattr', 'readdir', 'open', 'read'} <= set(handlers)
    for name in handlers:
        assert hasattr(getattr(fs.MirrorFS, name), '__wrapped__'), name
