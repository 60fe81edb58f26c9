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

"""The images of etc/container, built by tools/build-images.sh, and
containers of them run with podman (rootful), as the container tests run
them: the agent's with the options of etc/container/compose.yaml.
"""

import os
import re
import resource
import subprocess
import time

import yaml

import blobcr_lab

BUILD_SCRIPT = blobcr_lab.tool('build-images.sh')
RECIPES = os.path.join(blobcr_lab.SOURCE, 'etc', 'container')
AGENT_IMAGE = 'localhost/blobcr-agent'
CINDER_VOLUME_IMAGE = 'localhost/blobcr-cinder-volume'
# build-images.sh's exit status when podman cannot run a container here.
CANNOT_RUN = 77
CAP_SYS_RESOURCE = 24


class ContainerError(RuntimeError):
    """A podman command failed; carries its output."""


def podman_command():
    """podman as tools/lib/podman.sh runs it (which says why): runc;
    without systemd as PID 1, cgroups managed by podman itself and
    events in a file.
    """
    cmd = ['podman', '--runtime', 'runc']
    if not os.path.isdir('/run/systemd/system'):
        cmd += ['--cgroup-manager=cgroupfs', '--events-backend=file']
    return cmd


def limit_options():
    """tools/lib/podman.sh's podman_limits: without CAP_SYS_RESOURCE,
    this process's hard limits (processes: at most kernel.pid_max)
    instead of podman's defaults, which a container could not raise
    its limits to.
    """
    with open('/proc/self/status') as f:
        effective = int(re.search(r'^CapEff:\s*(\S+)', f.read(),
                                  re.M).group(1), 16)
    if effective >> CAP_SYS_RESOURCE & 1:
        return []
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    processes = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    with open('/proc/sys/kernel/pid_max') as f:
        pid_max = int(f.read())
    if processes == resource.RLIM_INFINITY or processes > pid_max:
        processes = pid_max
    return ['--ulimit', 'nofile=%d:%d' % (files, files),
            '--ulimit', 'nproc=%d:%d' % (processes, processes)]


def podman(*args, timeout=120, check=True):
    cmd = podman_command() + list(args)
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout)
    if check and done.returncode:
        raise ContainerError('%s exited with %d:\n%s%s' % (
            ' '.join(cmd), done.returncode, done.stdout, done.stderr))
    return done


def build_images(timeout=1800):
    """Run tools/build-images.sh: (exit status, its stderr, seconds)."""
    began = time.monotonic()
    done = subprocess.run(['bash', BUILD_SCRIPT], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stderr, time.monotonic() - began


def compose_service(name):
    with open(os.path.join(RECIPES, 'compose.yaml')) as f:
        return yaml.safe_load(f)['services'][name]


def run_options(service, host_paths):
    """podman run's options for a compose ``service``: its network,
    capabilities, security options, devices, device cgroup rules,
    environment, volumes (a host path that ``host_paths`` names is
    replaced by its value, the others kept: /dev) and stop grace period.
    Its restart policy is left out: a container that restarts would
    hide the failure a test looks for.
    """
    options = []
    if service.get('network_mode'):
        options += ['--network', service['network_mode']]
    for cap in service.get('cap_add', ()):
        options += ['--cap-add', cap]
    for opt in service.get('security_opt', ()):
        options += ['--security-opt', opt.replace(':', '=', 1)]
    for device in service.get('devices', ()):
        options += ['--device', device]
    for rule in service.get('device_cgroup_rules', ()):
        options += ['--device-cgroup-rule', rule]
    for key, value in (service.get('environment') or {}).items():
        options += ['--env', '%s=%s' % (key, value)]
    for volume in service.get('volumes', ()):
        host, rest = volume.split(':', 1)
        host = host_paths.get(host.rstrip('/') or '/', host)
        options += ['--volume', '%s:%s' % (host, rest)]
    grace = service.get('stop_grace_period')
    if grace:
        options += ['--stop-timeout', str(int(str(grace).rstrip('s')))]
    return options


class Container(object):
    """A container of ``image`` named ``name``, run detached."""

    def __init__(self, name, image, options=(), command=()):
        self.name = name
        self.image = image
        self.options = list(options)
        self.command = list(command)
        self.started = False

    def start(self):
        podman('run', '--detach', '--name', self.name, *limit_options(),
               *self.options, self.image, *self.command)
        self.started = True
        return self

    def state(self):
        """(running, exit code) from podman inspect."""
        out = podman('inspect', '--format',
                     '{{.State.Running}} {{.State.ExitCode}}',
                     self.name).stdout.split()
        return out[0] == 'true', int(out[1])

    def running(self):
        return self.state()[0]

    def logs(self):
        done = podman('logs', self.name, check=False)
        return done.stdout + done.stderr

    def execute(self, *command, user=None, timeout=300, check=True):
        args = ['exec'] + (['--user', user] if user else []) + \
            [self.name] + list(command)
        return podman(*args, timeout=timeout, check=check)

    def wait_log(self, text, timeout):
        """Wait until the container's log holds ``text``; its log. A
        container that exits, or a timeout, raises with the log's end.
        """
        deadline = time.monotonic() + timeout
        while True:
            logs = self.logs()
            if text in logs:
                return logs
            running, code = self.state()
            if not running or time.monotonic() > deadline:
                raise ContainerError(
                    '%s %s before its log said %r; its log ends:\n%s' % (
                        self.name, 'exited with %d' % code if not running
                        else 'still ran %d s after its start' % timeout,
                        text, '\n'.join(logs.splitlines()[-40:])))
            time.sleep(1)

    def stop(self, timeout):
        """SIGTERM (podman stop), SIGKILL after ``timeout``; its exit
        code.
        """
        podman('stop', '--time', str(timeout), self.name,
               timeout=timeout + 60)
        return self.state()[1]

    def remove(self):
        if self.started:
            podman('rm', '--force', '--time', '10', self.name, timeout=120,
                   check=False)
            self.started = False
