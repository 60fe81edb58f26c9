"""Who is asking: authentication of instances at the checkpoint endpoint.

Two ways, as in ARCHITECTURE §5:

* a per-instance token, ``HMAC-SHA256(host secret, instance id)`` in hex,
  handed to the guest (later through Nova vendordata) and sent as
  ``X-BlobCR-Token`` with ``X-Instance-ID``;
* the headers Neutron's metadata proxy adds: ``X-Instance-ID`` and
  ``X-Instance-ID-Signature = HMAC-SHA256(shared secret, instance id)``.

Comparisons are constant-time. A request that proves neither is refused.
"""

import hashlib
import hmac


def sign(secret, instance_id):
    """The HMAC-SHA256 of an instance id, in hex."""
    return hmac.new(secret.encode(), instance_id.encode(),
                    hashlib.sha256).hexdigest()


class Authenticator(object):

    def __init__(self, host_secret=None, metadata_secret=None):
        if not host_secret and not metadata_secret:
            raise ValueError('at least one secret is needed')
        self.host_secret = host_secret
        self.metadata_secret = metadata_secret

    def token_for(self, instance_id):
        """The token a guest must present (vendordata hands it out)."""
        return sign(self.host_secret, instance_id)

    def instance(self, headers):
        """The authenticated instance id, or None."""
        instance_id = headers.get('X-Instance-ID')
        if not instance_id or len(instance_id) > 64:
            return None
        token = headers.get('X-BlobCR-Token')
        if token and self.host_secret and hmac.compare_digest(
                token, sign(self.host_secret, instance_id)):
            return instance_id
        signature = headers.get('X-Instance-ID-Signature')
        if signature and self.metadata_secret and hmac.compare_digest(
                signature, sign(self.metadata_secret, instance_id)):
            return instance_id
        return None
