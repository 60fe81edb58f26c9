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

"""Errors raised by the BlobCR agent, each with a message a user can act on."""


class BlobCRError(Exception):
    """Base class: str(error) is the message shown to the user."""


class InvalidInput(BlobCRError):
    """The caller asked for something malformed (size, index, name...)."""


class ImageNotFound(BlobCRError):
    def __init__(self, image):
        super().__init__('image %r does not exist' % (image,))
        self.image = image


class AmbiguousImage(BlobCRError):
    def __init__(self, image, matches):
        super().__init__('image name %r is ambiguous: it names %s; use an id'
                         % (image, ', '.join(sorted(matches))))


class VersionNotFound(BlobCRError):
    def __init__(self, image, version):
        super().__init__('image %s has no version %s' % (image, version))


class VersionNotStable(BlobCRError):
    def __init__(self, image, version, state):
        super().__init__('version %s of image %s is %s, not stable'
                         % (version, image, state))
        self.state = state


class CommitAborted(BlobCRError):
    """The pending version was marked failed before it could turn stable."""


class ObjectNotFound(BlobCRError):
    def __init__(self, kind, name):
        super().__init__('%s object %s is missing from the backend'
                         % (kind, name))
        self.kind = kind
        self.name = name


class CorruptObject(BlobCRError):
    def __init__(self, kind, name, why):
        super().__init__('%s object %s is corrupt: %s' % (kind, name, why))
        self.kind = kind
        self.name = name


class Conflict(BlobCRError):
    """A compare-and-set on a header lost a race; the caller retries."""


class BackendUnavailable(BlobCRError):
    """The object backend cannot be reached or refused the operation."""


class BackendFull(BackendUnavailable):
    """The backend is out of space (or over a quota): nothing was written
    in place of what was asked, and what was already stable is untouched.
    """


class NotAuthorized(BlobCRError):
    """The calling host may not ask this (a peer call about another
    host than the one the broker says sent it).
    """


class Busy(BlobCRError):
    """The operation cannot start now (a persist or another checkpoint
    of the same image is under way); nothing was done: try again.
    """


class Fenced(BlobCRError):
    """Another host took the image over (its header's epoch moved on,
    Repository.take_over): this writer may publish nothing of it.
    """


class QuiesceFailed(BlobCRError):
    """The guest could not be quiesced; nothing was checkpointed."""


class OverBudget(BlobCRError):
    """A guest checkpoint past its image's or its project's budget, or a
    new group past its project's (issue 54, finding 3); nothing was
    done. The guest endpoint answers 507 with the reason.
    """

    def __init__(self, reason, scope, usage=None, limits=None):
        super().__init__(reason)
        self.scope = scope
        self.usage = usage
        self.limits = limits
