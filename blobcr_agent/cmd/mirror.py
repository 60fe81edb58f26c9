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

"""blobcr-mirror: serve attached images on a FUSE mount.

    blobcr-mirror --mount /var/lib/blobcr/mnt --cache /var/lib/blobcr/cache \\
        --control /run/blobcr/mirror.sock [--mode selective-cow]

Images are attached, checkpointed and detached through the control socket
(see blobcr_agent.mirror.service). On start it re-attaches every image
whose mirror it finds in the cache directory, resuming persists a crash
interrupted. SIGTERM or SIGINT unmounts and stops it cleanly.
"""

import argparse
import signal
import sys
import threading

from oslo_config import cfg
from oslo_log import log as logging

from blobcr_agent import conf as blobcr_conf
from blobcr_agent.conf import agent as agent_conf
from blobcr_agent.mirror import flushlog
from blobcr_agent.mirror import image as image_mod
from blobcr_agent.mirror import service as service_mod
from blobcr_agent.repository import repository
from blobcr_common import exception

LOG = logging.getLogger(__name__)


def main(argv=None):
    parser = argparse.ArgumentParser(prog='blobcr-mirror',
                                     description=__doc__.split('\n')[0])
    parser.add_argument('--mount', required=True)
    parser.add_argument('--cache', required=True)
    parser.add_argument('--control', required=True)
    parser.add_argument('--mode', choices=image_mod.MODES,
                        default='selective-cow')
    parser.add_argument('--cow-chunks', type=int, default=64)
    parser.add_argument('--cow-spill-mb', type=int,
                        default=agent_conf.DEFAULT_COW_SPILL_MB,
                        help='[agent] cow_spill_mb: MiB of disk per image '
                             'for copy-on-write copies past the memory '
                             'ones (0: memory only)')
    parser.add_argument('--upload-ahead', type=float,
                        default=agent_conf.DEFAULT_UPLOAD_AHEAD_INTERVAL,
                        help='[agent] upload_ahead_interval: seconds '
                             'between rounds sending quiet dirty chunks '
                             'ahead of the next checkpoint (0: off)')
    parser.add_argument('--readahead-chunks', type=int, default=64,
                        help='chunks fetched ahead of a sequential reader '
                        'of a lazily restarted image (0: none)')
    parser.add_argument('--delta-max-fraction', type=float,
                        help='[repository] delta_max_fraction: persist a '
                             'chunk as a delta when at most this fraction '
                             'of it changed (0: whole chunks only)')
    parser.add_argument('--delta-pack-kb', type=int,
                        help='[repository] delta_pack_max_kb: pack a '
                             'version\'s deltas into objects of at most '
                             'this many KiB (0: each alone, with a link)')
    parser.add_argument('--in-order', action='store_true',
                        help='persist chunks in index order instead of the '
                             'adaptive order')
    parser.add_argument('--durability', choices=flushlog.DURABILITIES,
                        default='',
                        help='[agent] durability: what a guest\'s flush '
                             'waits for when its attach does not say: '
                             'cluster (its writes in the image\'s write-'
                             'ahead log in RADOS) or host (a local '
                             'fdatasync); default: cluster on RADOS, host '
                             'on the local store')
    parser.add_argument('--io-loop', choices=['native', 'pyfuse3'],
                        default='native',
                        help='serve images/ from the C libfuse3 loop '
                             '(default) or from pyfuse3')
    parser.add_argument('--config-file', action='append', default=[])
    parser.add_argument('--backend', choices=['local', 'rados'])
    parser.add_argument('--store')
    parser.add_argument('--ceph-conf')
    parser.add_argument('--debug', action='store_true')
    args = parser.parse_args(argv)
    conf = blobcr_conf.CONF
    logging.register_options(conf)
    conf(['--config-file=%s' % f for f in args.config_file],
         project='blobcr', default_config_files=[])
    conf.set_override('debug', args.debug)
    logging.setup(conf, 'blobcr-mirror')
    blobcr_conf.override_store(conf, args.backend, args.store,
                               args.ceph_conf)
    try:
        if args.delta_max_fraction is not None:
            conf.set_override('delta_max_fraction', args.delta_max_fraction,
                              'repository')
        if args.delta_pack_kb is not None:
            conf.set_override('delta_pack_max_kb', args.delta_pack_kb,
                              'repository')
        repo = repository.Repository.from_conf(conf)
    except (exception.BlobCRError, cfg.Error, ValueError) as e:
        print('blobcr-mirror: error: %s' % e, file=sys.stderr)
        return 1
    service = service_mod.MirrorService(
        repo, args.mount, args.cache, mode=args.mode,
        cow_chunks=args.cow_chunks, cow_spill_mb=args.cow_spill_mb,
        adaptive=not args.in_order,
        io_loop=args.io_loop, readahead_chunks=args.readahead_chunks,
        upload_ahead=args.upload_ahead, durability=args.durability)
    service.recover()
    server = service.serve_control(args.control)

    def stop(signum, frame):
        LOG.info('signal %d: unmounting', signum)
        # Unmounting makes run() return; from a thread, as this handler
        # interrupts the thread that serves the mount.
        threading.Thread(target=service.unmount, name='blobcr-stop').start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        service.run(ready=lambda: LOG.info('serving %s', args.mount))
    finally:
        server.shutdown()
        repo.close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
