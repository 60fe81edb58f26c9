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

"""A small real QEMU guest under libvirt (TCG), for end-to-end tests.

tools/build-guest.sh makes the base image: the Debian kernel and an
initramfs whose /init (tools/guest/init) loads the virtio and ext4
modules, starts qemu-ga, runs /scenario.sh, prints
``BLOBCR-GUEST-EXIT <status>`` on the serial console and powers off.
A test supplies its scenario (and any other files: a Python package,
credentials) as an extra cpio archive appended to the base initramfs, so
the base image is built once.

The guest's network is QEMU user-mode (slirp) with restrict=on: the guest
(GUEST_IP) reaches nothing but METADATA_IP:80, which QEMU forwards to
127.0.0.1:<metadata_port> on the host.

libvirt: qemu:///session does not start a per-user daemon for root (the
client sends root to the system socket), so SessionLibvirt runs a
libvirtd of its own in session mode, inside a user namespace in which
root appears as an ordinary user, with all its state in one directory.
QEMU keeps root's identity outside it, so it can open root's files (and
a FUSE mount without allow_other). Its uri is
``qemu:///session?socket=DIR/run/libvirt/libvirt-sock``.

The fixtures guest_image and session_libvirt (session-scoped) are in
tests/lab_fixtures.py.
"""

import gzip
import io
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from xml.sax import saxutils

import libvirt
import libvirt_qemu

import blobcr_lab
from blobcr_lab import hosts

BUILD_SCRIPT = blobcr_lab.tool('build-guest.sh')
DEFAULT_BASE_DIR = os.path.join(blobcr_lab.SOURCE, 'build', 'guest')

NETWORK = '169.254.169.0/24'
GATEWAY = '169.254.169.2'
GUEST_IP = '169.254.169.15'
METADATA_IP = '169.254.169.254'
# Busybox's nc (busybox-static, installed by tools/build-guest.sh) joins
# each guest connection to METADATA_IP:80 to the host's metadata port.
NC = '/bin/busybox nc'

READY_MARKER = 'BLOBCR-GUEST-READY'
EXIT_RE = re.compile(r'BLOBCR-GUEST-EXIT (\d+)')
AGENT_CHANNEL = 'org.qemu.guest_agent.0'
KERNEL_CMDLINE = 'console=ttyS0 quiet panic=-1 tsc=reliable no_timer_check'
# qboot (from qemu-system-data) jumps to the kernel about 0.3 s sooner than
# SeaBIOS under TCG.
QBOOT = '/usr/share/qemu/qboot.rom'


# Runs libvirtd (argv) as a child subreaper: every orphan below it (QEMU
# daemonizes) becomes its child and is reaped at once. It passes SIGTERM
# and SIGINT on, gets SIGTERM itself if the test process dies, and once
# libvirtd has exited, kills the QEMUs left running (its own children).
_REAPER = '''
import ctypes, os, signal, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
child = subprocess.Popen(sys.argv[1:])
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda s, f: child.send_signal(s))
code = 1
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        break
    if pid == child.pid:
        code = os.waitstatus_to_exitcode(status)
        break
me = os.getpid()
for entry in os.listdir('/proc'):
    try:
        with open('/proc/%s/stat' % entry) as f:
            ppid = int(f.read().rsplit(')', 1)[1].split()[1])
        if ppid == me:
            os.kill(int(entry), signal.SIGKILL)
    except (OSError, ValueError, IndexError):
        pass
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
sys.exit(code)
'''


class GuestError(Exception):
    pass


def build_image(base_dir=DEFAULT_BASE_DIR, timeout=1200):
    """Run tools/build-guest.sh (cached) and return the image directory."""
    proc = subprocess.run(['bash', BUILD_SCRIPT, base_dir],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=timeout)
    out = proc.stdout.decode('utf-8', 'replace')
    if proc.returncode:
        raise GuestError('%s failed (%d):\n%s'
                         % (BUILD_SCRIPT, proc.returncode, out))
    for name in ('vmlinuz', 'initramfs.img'):
        if not os.path.isfile(os.path.join(base_dir, name)):
            raise GuestError('%s did not make %s:\n%s'
                             % (BUILD_SCRIPT, name, out))
    return base_dir


class SessionLibvirt(object):
    """A session-mode libvirtd of our own, stopped by PID.

    Its state (sockets, domain definitions, logs, capability cache) lives
    under ``directory``; keep that path short: libvirt puts unix sockets
    (108 bytes at most) below it.
    """

    def __init__(self, directory=None, host_uuid=None, hostname=None,
                 network=None):
        # host_uuid: another "host" on this machine (libvirt refuses to
        # migrate a domain to a daemon with its own host UUID).
        # hostname: its own, in a UTS namespace (getHostname() is the
        # hypervisor's name for Nova, unique per compute node).
        # network: a hosts.LinkedNamespace to run in; incoming
        # migrations listen on its address.
        self.host_uuid = host_uuid
        self.hostname = hostname
        self.network = network
        self._own_dir = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix='blobcr-lv-')
        self.socket = os.path.join(self.directory, 'run', 'libvirt',
                                   'libvirt-sock')
        self.uri = 'qemu:///session?socket=' + self.socket
        self.log = os.path.join(self.directory, 'libvirtd.log')
        self.proc = None

    def start(self, timeout=60):
        for sub in ('home', 'run', 'config/libvirt', 'cache'):
            os.makedirs(os.path.join(self.directory, sub), mode=0o700,
                        exist_ok=True)
        # QEMU's stdout/stderr to files: no virtlogd to start and stop.
        # No seccomp sandbox: it forbids the exec of the guestfwd's cmd:.
        with open(os.path.join(self.directory, 'config', 'libvirt',
                               'qemu.conf'), 'w') as f:
            f.write('stdio_handler = "file"\nseccomp_sandbox = 0\n')
            if self.network:
                # Incoming migrations listen on the namespace's address
                # and say so (the default is the host name, which need
                # not resolve).
                f.write('migration_address = "%s"\nmigration_host = "%s"\n'
                        % (self.network.address, self.network.address))
        if self.host_uuid:
            with open(os.path.join(self.directory, 'config', 'libvirt',
                                   'libvirtd.conf'), 'w') as f:
                f.write('host_uuid = "%s"\n' % self.host_uuid)
        env = {
            'PATH': '/usr/sbin:/usr/bin:/sbin:/bin',
            'HOME': os.path.join(self.directory, 'home'),
            'XDG_RUNTIME_DIR': os.path.join(self.directory, 'run'),
            'XDG_CONFIG_HOME': os.path.join(self.directory, 'config'),
            'XDG_CACHE_HOME': os.path.join(self.directory, 'cache'),
        }
        # BLOBCR_LIBVIRT_LOG_LEVEL=1 for a debug log when a test fails.
        level = os.environ.get('BLOBCR_LIBVIRT_LOG_LEVEL', '3')
        env['LIBVIRT_DEBUG'] = level
        env['LIBVIRT_LOG_OUTPUTS'] = '%s:file:%s' % (level, self.log)
        # A uid other than 0 in the namespace makes libvirtd unprivileged
        # (session mode). QEMU daemonizes, so its zombie goes to the
        # nearest subreaper: the wrapper reaps it at once (libvirt waits
        # for the pid to vanish, and a slow init costs seconds per stop).
        argv = ['unshare', '--map-user=1000', '--map-group=1000',
                '/usr/sbin/libvirtd']
        if self.hostname:
            # The UTS namespace is made as root, before the user
            # namespace (where libvirtd has no capability left).
            argv = hosts.with_hostname(self.hostname, argv)
        if self.network:
            argv = self.network.command(argv)
        with open(self.log + '.stderr', 'ab') as err:
            self.proc = subprocess.Popen(
                [sys.executable, '-c', _REAPER] + argv,
                env=env, cwd=self.directory, stdin=subprocess.DEVNULL,
                stdout=err, stderr=err)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise GuestError('libvirtd exited (%s): %s'
                                 % (self.proc.returncode, self._log_tail()))
            if os.path.exists(self.socket):
                try:
                    libvirt.open(self.uri).close()
                    return self
                except libvirt.libvirtError:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise GuestError('libvirtd did not answer at %s: %s'
                                 % (self.uri, self._log_tail()))
            time.sleep(0.1)

    def _log_tail(self):
        text = ''
        for path in (self.log + '.stderr', self.log):
            try:
                with open(path, errors='replace') as f:
                    text += f.read()[-3000:]
            except OSError:
                pass
        return text

    def stop(self):
        """Stop libvirtd. Domains should be destroyed first (GuestVM)."""
        if self.proc is not None and self.proc.poll() is None:
            # The wrapper passes SIGTERM on to libvirtd and exits with it.
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self._kill_libvirtd()
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _kill_libvirtd(self):
        try:
            with open(os.path.join(self.directory, 'run', 'libvirt',
                                   'libvirtd.pid')) as f:
                os.kill(int(f.read().strip()), signal.SIGKILL)
        except (OSError, ValueError):
            pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def _cpio_entry(out, name, mode, data=b'', ino=0):
    # newc: "070701", 13 fields in 8 hex digits, the name, the data; the
    # header+name and the data are each padded to 4 bytes.
    name_bytes = name.encode() + b'\0'
    fields = (ino, mode, 0, 0, 1, int(time.time()), len(data),
              0, 0, 0, 0, len(name_bytes), 0)
    header = b'070701' + b''.join(b'%08X' % v for v in fields)
    out.write(header + name_bytes)
    out.write(b'\0' * (-(len(header) + len(name_bytes)) % 4))
    out.write(data)
    out.write(b'\0' * (-len(data) % 4))


def make_overlay(files):
    """A gzip'd newc archive of {guest_path: bytes, str or host path}.

    bytes (or str) are the content; a path given as os.PathLike is a host
    file or directory copied in (directories recursively, modes kept).
    Parent directories are added: the kernel does not create them.
    Content starting with '#!' is made executable.
    """
    entries = {}

    def add_dirs(path):
        parent = os.path.dirname(path)
        while parent not in ('', '/') and parent not in entries:
            entries[parent] = (stat.S_IFDIR | 0o755, b'')
            parent = os.path.dirname(parent)

    def add_host(guest, host):
        st = os.lstat(host)
        if stat.S_ISDIR(st.st_mode):
            entries[guest] = (stat.S_IFDIR | 0o755, b'')
            for child in sorted(os.listdir(host)):
                if child == '__pycache__':
                    continue
                add_host(guest + '/' + child, os.path.join(host, child))
        elif stat.S_ISREG(st.st_mode):
            with open(host, 'rb') as f:
                entries[guest] = (stat.S_IFREG | (st.st_mode & 0o777),
                                  f.read())
        elif stat.S_ISLNK(st.st_mode):
            entries[guest] = (stat.S_IFLNK | 0o777,
                              os.readlink(host).encode())

    for guest, content in files.items():
        guest = '/' + guest.strip('/')
        add_dirs(guest)
        if isinstance(content, os.PathLike):
            add_host(guest, os.fspath(content))
        else:
            if isinstance(content, str):
                content = content.encode()
            mode = 0o755 if content.startswith(b'#!') else 0o644
            entries[guest] = (stat.S_IFREG | mode, content)
    raw = io.BytesIO()
    # Parents sort before their children.
    for ino, path in enumerate(sorted(entries), 1):
        mode, data = entries[path]
        _cpio_entry(raw, path.lstrip('/'), mode, data, ino)
    _cpio_entry(raw, 'TRAILER!!!', 0)
    return gzip.compress(raw.getvalue(), compresslevel=1)


class GuestVM(object):
    """One guest: a libvirt domain booting the base image with a scenario.

    name: domain name (short: libvirt derives socket paths from it).
    disk: raw file seen as /dev/vda, a <disk type='file'> whose source is
        this path (how the agent finds the domain of an image).
    uri: libvirt URI, e.g. SessionLibvirt(...).uri.
    base_dir: the output of tools/build-guest.sh.
    files: {guest_path: bytes | str | os.PathLike} for the overlay;
        '/scenario.sh' is what /init runs.
    metadata_port: host port on 127.0.0.1 that METADATA_IP:80 reaches.
    workdir: where the per-guest initrd and console log go (a temp dir,
        removed at cleanup, by default).
    console_log: serial console file (default workdir/console.log).
    cache, io: the disk's driver attributes; cache='none' (O_DIRECT)
        exercises the real datapath, 'writeback' suits filesystems
        without O_DIRECT.
    cmdline_extra: appended to the kernel command line.
    kernel: default base_dir/vmlinux (PVH), else base_dir/vmlinuz.
    firmware: default qboot when installed, else libvirt's (SeaBIOS).
    """

    def __init__(self, name, disk, uri, base_dir=DEFAULT_BASE_DIR,
                 files=None, metadata_port=None, memory_mib=512,
                 workdir=None, console_log=None, cache='none', io='threads',
                 cmdline_extra='', kernel=None, firmware=None):
        self.name = name
        self.disk = os.path.abspath(disk)
        self.uri = uri
        self.base_dir = base_dir
        self.files = dict(files or {})
        self.metadata_port = metadata_port
        self.memory_mib = memory_mib
        self._own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix='blobcr-guest-')
        self.console_log = console_log or os.path.join(self.workdir,
                                                       'console.log')
        self.cache = cache
        self.io = io
        self.cmdline = KERNEL_CMDLINE + (' ' + cmdline_extra
                                         if cmdline_extra else '')
        self.initrd = os.path.join(self.workdir, 'initrd-%s.img' % name)
        if kernel is None:
            # The uncompressed ELF boots through PVH, without SeaBIOS's
            # loader and the kernel's xz decompression (5 s under TCG).
            kernel = os.path.join(base_dir, 'vmlinux')
            if not os.path.exists(kernel):
                kernel = os.path.join(base_dir, 'vmlinuz')
        self.kernel = kernel
        if firmware is None and os.path.exists(QBOOT):
            firmware = QBOOT
        self.firmware = firmware
        self.conn = None
        self.domain = None
        self.started_at = None

    def _netdev(self):
        netdev = ('user,id=blobcrnet,net=%s,host=%s,restrict=on'
                  % (NETWORK, GATEWAY))
        if self.metadata_port:
            # A chardev target ('-tcp:127.0.0.1:PORT') is one connection
            # made when QEMU starts and carries one guest connection only;
            # 'cmd:' runs the command per guest connection instead.
            netdev += (',guestfwd=tcp:%s:80-cmd:%s 127.0.0.1 %d'
                       % (METADATA_IP, NC, self.metadata_port))
        return netdev

    def xml(self):
        q = saxutils.quoteattr
        return """<domain type='qemu'
    xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{name}</name>
  <memory unit='MiB'>{memory}</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>{loader}
    <kernel>{kernel}</kernel>
    <initrd>{initrd}</initrd>
    <cmdline>{cmdline}</cmdline>
  </os>
  <features><acpi/></features>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw' cache={cache} io={io}/>
      <source file={disk}/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <serial type='file'>
      <source path={console} append='off'/>
      <target port='0'/>
    </serial>
    <channel type='unix'>
      <target type='virtio' name='{channel}'/>
    </channel>
    <rng model='virtio'>
      <backend model='random'>/dev/urandom</backend>
    </rng>
    <controller type='usb' model='none'/>
    <memballoon model='none'/>
  </devices>
  <qemu:commandline>
    <qemu:arg value='-netdev'/>
    <qemu:arg value={netdev}/>
    <qemu:arg value='-device'/>
    <qemu:arg value='virtio-net-pci,netdev=blobcrnet,romfile=,addr=0x1e'/>
  </qemu:commandline>
</domain>
""".format(name=saxutils.escape(self.name), memory=self.memory_mib,
           loader=("\n    <loader type='rom'>%s</loader>"
                   % saxutils.escape(self.firmware) if self.firmware else ''),
           kernel=saxutils.escape(self.kernel),
           initrd=saxutils.escape(self.initrd),
           cmdline=saxutils.escape(self.cmdline),
           cache=q(self.cache), io=q(self.io), disk=q(self.disk),
           console=q(self.console_log), channel=AGENT_CHANNEL,
           netdev=q(self._netdev()))

    def start(self):
        """Define and boot the domain (returns without waiting)."""
        base = os.path.join(self.base_dir, 'initramfs.img')
        with open(self.initrd, 'wb') as out:
            with open(base, 'rb') as f:
                shutil.copyfileobj(f, out)
            # Linux unpacks concatenated archives in order; ours come last.
            out.write(make_overlay(self.files))
        if os.path.exists(self.console_log):
            os.unlink(self.console_log)
        self.conn = libvirt.open(self.uri)
        self.domain = self.conn.defineXML(self.xml())
        self.started_at = time.monotonic()
        self.domain.create()
        return self

    def console(self):
        try:
            with open(self.console_log, 'rb') as f:
                return f.read().decode('utf-8', 'replace')
        except FileNotFoundError:
            return ''

    def is_running(self):
        try:
            return bool(self.domain.isActive())
        except libvirt.libvirtError:
            return False

    def wait_for(self, pattern, timeout=120):
        """Wait until the console matches pattern (str or regex)."""
        regex = re.compile(re.escape(pattern) if isinstance(pattern, str)
                           else pattern)
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self.console())
            if match:
                return match
            if not self.is_running():
                # One last read: the guest may have written and stopped.
                match = regex.search(self.console())
                if match:
                    return match
                raise GuestError('guest %s stopped before %r; console:\n%s'
                                 % (self.name, regex.pattern,
                                    self.console()[-4000:]))
            if time.monotonic() > deadline:
                raise GuestError('no %r on the console of %s after %ss; '
                                 'console:\n%s'
                                 % (regex.pattern, self.name, timeout,
                                    self.console()[-4000:]))
            time.sleep(0.1)

    def wait_exit(self, timeout=120):
        """Wait for the scenario's status and the guest's power-off."""
        status = int(self.wait_for(EXIT_RE, timeout).group(1))
        deadline = time.monotonic() + 30
        while self.is_running():
            if time.monotonic() > deadline:
                raise GuestError('guest %s printed its exit status but did '
                                 'not power off' % self.name)
            time.sleep(0.1)
        return status

    def agent(self, command, arguments=None, timeout=30):
        """Run a qemu-ga command (e.g. 'guest-fsfreeze-status')."""
        request = {'execute': command}
        if arguments is not None:
            request['arguments'] = arguments
        out = libvirt_qemu.qemuAgentCommand(self.domain, json.dumps(request),
                                            timeout, 0)
        return json.loads(out).get('return')

    def destroy(self):
        """Stop and undefine the domain; remove our files. Idempotent."""
        if self.domain is not None:
            try:
                if self.domain.isActive():
                    self.domain.destroy()
            except libvirt.libvirtError:
                pass
            try:
                self.domain.undefine()
            except libvirt.libvirtError:
                pass
            self.domain = None
        if self.conn is not None:
            try:
                self.conn.close()
            except libvirt.libvirtError:
                pass
            self.conn = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        elif os.path.exists(self.initrd):
            os.unlink(self.initrd)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.destroy()
