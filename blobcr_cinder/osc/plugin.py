"""OpenStackClient plugin: ``openstack blobcr checkpoint ...``.

The chain of a volume comes from Cinder's API alone (its snapshots, the
metadata the BlobCR driver records on them, and the volumes made from
them), so any user who can list their volumes can draw it.
"""

API_NAME = 'blobcr'
API_VERSION_OPTION = 'os_blobcr_api_version'
API_VERSIONS = {'1': 'blobcr_cinder.osc.plugin'}
DEFAULT_API_VERSION = '1'


def make_client(instance):
    """The block-storage client of the session (openstacksdk)."""
    return instance.sdk_connection.block_storage


def build_option_parser(parser):
    return parser
