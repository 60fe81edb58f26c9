"""Client of the mirror's control socket (JSON lines)."""

from blobcr_agent import control


class MirrorClient(control.Client):
    what = 'the mirror'
