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

"""The errors of the guest side, one class per thing the caller can do."""


class GuestError(Exception):
    """Base of every error this package raises."""


class ConfigError(GuestError):
    """A configuration source exists but cannot be used."""


class CheckpointError(GuestError):
    """The proxy answered with an error: ``status`` and its message."""

    def __init__(self, status, message):
        super().__init__('%s (HTTP %d)' % (message, status))
        self.status = status
        self.message = message

    @property
    def refused(self):
        """A 4xx, or 507 (the image's or project's checkpoint budget is
        reached until snapshots are deleted): the request itself was
        refused (retrying won't help).
        """
        return 400 <= self.status < 500 or self.status == 507


class EndpointUnreachable(GuestError):
    """No connection could be made to the proxy."""


class CheckpointTimeout(GuestError):
    """No answer, or no stable version, within the time allowed."""


class CheckpointFailed(GuestError):
    """A version the proxy took could not be persisted."""

    def __init__(self, message, version=None):
        super().__init__(message)
        self.version = version


class CriuError(GuestError):
    """CRIU is missing, or it could not dump or restore."""
