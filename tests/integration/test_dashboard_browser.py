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

"""The Checkpoints panel in a real browser against the real stack.

Horizon 27 with the BlobCR panel (tests/dashboard/live_settings.py) runs
under Django's runserver in a process of its own, on the session's real
Keystone and Cinder (blobcr_lab/openstack.py) with the BlobCR local
backend and its real agents (blobcr_lab/cinder_hosts.py). Debian's headless
Chromium, driven by selenium through chromium-driver, logs in as demo,
opens the panel, takes a live checkpoint of an attached volume with the
table's row action (the row follows it by Horizon's ajax refresh, the
page is not reloaded), and restarts a volume group (volumes only: the
stack has no Nova) from its group checkpoint; the restart runs in a
process of its own and the group's row follows it to the end. The
DataTables, the chain picture (SVG) and the groups are checked in the
DOM, and a screenshot of the page is checked to be a real image
(BLOBCR_DASHBOARD_SCREENSHOT=PATH also copies it there: the docs' one,
doc/source/_static/dashboard-checkpoints.png, is made that way).
"""

import io
import os
import secrets
import shutil
import sys
import time
import urllib.request

import pytest

from blobcr_lab.nova_attach import Attachment
from blobcr_lab import openstack as stack_module
from tests.integration.test_restart import Job

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CHROMIUM = '/usr/bin/chromium'
CHROMEDRIVER = '/usr/bin/chromedriver'
SCREENSHOT_ENV = 'BLOBCR_DASHBOARD_SCREENSHOT'


@pytest.fixture(scope='module')
def horizon(openstack_cloud, tmp_path_factory):
    """The base URL of a Horizon server on the stack's Keystone."""
    workdir = tmp_path_factory.mktemp('horizon')
    port = stack_module.free_port()
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join(
                   [os.path.join(TOP, 'tests', 'dashboard', 'live'), TOP]),
               DJANGO_SETTINGS_MODULE='tests.dashboard.live_settings',
               PYTHONWARNINGS='ignore',
               BLOBCR_HORIZON_SECRET_KEY=secrets.token_hex(32),
               BLOBCR_HORIZON_KEYSTONE_URL=openstack_cloud.auth_url,
               BLOBCR_HORIZON_STATIC_ROOT=str(workdir / 'static'),
               BLOBCR_HORIZON_RESTART_DIR=str(workdir / 'restarts'))
    log = str(workdir / 'horizon.log')
    # --insecure: runserver serves the static files (and the compressed
    # ones, through Horizon's finders) with DEBUG off.
    server = stack_module.ServiceProcess(
        'horizon', [sys.executable, '-m', 'django', 'runserver',
                    '--noreload', '--insecure', '127.0.0.1:%d' % port],
        env, log, cwd=TOP).start()
    url = 'http://127.0.0.1:%d' % port
    try:
        deadline = time.monotonic() + 60
        while True:
            server.check_running()
            try:
                urllib.request.urlopen(url + '/auth/login/', timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError('Horizon not up after 60 s:\n'
                                         + stack_module.tail(log))
                time.sleep(0.5)
        yield url
    finally:
        server.stop()


@pytest.fixture(scope='module')
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    for path in (CHROMIUM, CHROMEDRIVER):
        assert os.access(path, os.X_OK), (
            '%s missing: tools/install-deps.sh installs chromium and '
            'chromium-driver' % path)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ('--headless=new', '--no-sandbox', '--disable-gpu',
                '--disable-dev-shm-usage', '--window-size=1500,1100',
                '--user-data-dir=%s' % tmp_path_factory.mktemp('chromium')):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(what, check, timeout=60, every=0.5, driver=None):
    from selenium.common import exceptions
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()
        except exceptions.StaleElementReferenceException:
            got = None      # the panel's script replaced what it read
        if got:
            return got
        assert time.monotonic() < deadline, 'no %s after %s s%s' % (
            what, timeout, '' if driver is None else
            ' at %s; page text:\n%s' % (
                driver.current_url,
                driver.find_element('tag name', 'body').text[-3000:]))
        time.sleep(every)


def login(driver, url, user='demo'):
    from selenium.webdriver.common.by import By
    driver.get(url + '/auth/login/?next=/project/checkpoints/')
    driver.find_element(By.ID, 'id_username').send_keys(user)
    driver.find_element(By.ID, 'id_password').send_keys(
        stack_module.PASSWORDS[user])
    driver.find_element(By.ID, 'loginBtn').click()
    wait_for('panel after login',
             lambda: driver.find_elements(By.CSS_SELECTOR, 'table#chains'),
             driver=driver)


def rows(driver, tries=5):
    """{id: (kind, state, tree text, version)} of the chains table (read
    again if the panel's script replaced the rows meanwhile).
    """
    from selenium.common import exceptions
    try:
        return _rows(driver)
    except exceptions.StaleElementReferenceException:
        if tries <= 1:
            raise
        time.sleep(0.5)
        return rows(driver, tries - 1)


def _rows(driver):
    from selenium.webdriver.common.by import By
    found = {}
    for tr in driver.find_elements(By.CSS_SELECTOR, 'table#chains tbody '
                                   'tr[data-object-id]'):
        found[tr.get_attribute('data-object-id')] = (
            tr.get_attribute('data-kind'), tr.get_attribute('data-state'),
            tr.find_element(By.CSS_SELECTOR, 'span.blobcr-tree').text,
            tr.get_attribute('data-version'))
    return found


def submit_modal(driver, fields):
    """Fill the action's dialog (or page) and submit it."""
    from selenium.webdriver.common.by import By
    form = wait_for('action form', lambda: [
        f for f in driver.find_elements(By.CSS_SELECTOR, 'form')
        if f.is_displayed() and f.find_elements(
            By.CSS_SELECTOR, 'input[type=submit]')], driver=driver)[0]
    for name, value in fields.items():
        field = form.find_element(By.NAME, name)
        if field.get_attribute('type') == 'checkbox':
            # Horizon's themed checkbox hides the input behind its label.
            if field.is_selected() != value:
                driver.execute_script('arguments[0].click();', field)
        else:
            field.clear()
            field.send_keys(value)
    form.find_element(By.CSS_SELECTOR, 'input[type=submit]').click()


def check_png(png):
    """A real, non-blank image of the page: its size, and enough
    different colours in the table's part of it.
    """
    from PIL import Image
    image = Image.open(io.BytesIO(png))
    image.load()
    assert image.format == 'PNG'
    assert image.width >= 1000 and image.height >= 600, image.size
    colours = image.convert('RGB').getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, len(colours or ())
    top = max(count for count, _ in colours)
    # Not one colour over (nearly) the whole page.
    assert top < 0.97 * image.width * image.height


def make_chain(stack, api, job):
    """A group checkpoint of the job and a clone of one member's
    checkpoint; returns ({volume: member snapshot}, group snapshot, clone).
    """
    group_snapshot = job.checkpoint('cp-%s' % job.suffix)
    members = {s['volume_id']: s for s in api.get(
        '/snapshots/detail', microversion='3.14').json()['snapshots']
        if s.get('group_snapshot_id') == group_snapshot}
    clone = api.post('/volumes', json={'volume': {
        'name': 'clone-%s' % job.suffix, 'size': 1,
        'snapshot_id': members[job.volumes[0]]['id']}}).json()['volume']
    stack.wait_status('volume', clone['id'], 'available', timeout=120)
    return members, group_snapshot, clone['id']


def check_chain(browser, job, members, group_snapshot, clone):
    from selenium.webdriver.common.by import By
    shown = rows(browser)
    first, member = job.volumes[0], members[job.volumes[0]]['id']
    assert shown[first][0] == 'volume'
    assert shown[member][:2] == ('checkpoint', 'stable')
    assert shown[clone][0] == 'volume'
    # The clone is drawn under the checkpoint it was made from.
    ids = list(shown)
    assert ids.index(clone) == ids.index(member) + 1
    assert shown[clone][2].endswith('volume clone-%s' % job.suffix)
    group_row = browser.find_element(
        By.CSS_SELECTOR, 'table#groups tr[data-object-id="%s"]'
        % group_snapshot)
    assert group_row.get_attribute('data-complete') == 'yes'
    assert '2/2 stable' in group_row.text
    check_picture(browser, job, members, group_snapshot, clone)


def check_picture(browser, job, members, group_snapshot, clone):
    """The SVG: a dot per member checkpoint on its volume's lane, the
    clone's lane starting from its checkpoint, the group's cut through
    both members.
    """
    from selenium.webdriver.common.by import By
    svg = browser.find_element(By.CSS_SELECTOR, 'svg.blobcr-chain-picture')
    assert svg.size['width'] > 500 and svg.size['height'] > 50, svg.size

    def marks(kind):
        return {e.get_attribute('data-id') or e.get_attribute('data-to'): e
                for e in svg.find_elements(By.CSS_SELECTOR,
                                           '[data-kind="%s"]' % kind)}
    dots, lanes = marks('checkpoint'), marks('lane')
    for volume, member in members.items():
        dot = dots[member['id']]
        assert dot.get_attribute('data-state') == 'stable'
        assert dot.get_attribute('cy') == lanes[volume].get_attribute('y1')
    assert marks('clone')[clone].get_attribute('data-from') == \
        members[job.volumes[0]]['id']
    assert marks('cut')[group_snapshot].get_attribute('data-members') == '2'


def take_checkpoint(browser, horizon, volume, name):
    """Take one with the table's row action; its row once it is stable,
    as Horizon's ajax row update shows it (the page is not reloaded).
    """
    from selenium.webdriver.common.by import By
    browser.find_element(By.CSS_SELECTOR, 'tr[data-object-id="%s"] '
                         'a.blobcr-take' % volume).click()
    submit_modal(browser, {'name': name})

    def shown(state=None):
        for tr in browser.find_elements(By.CSS_SELECTOR,
                                        'table#chains tr.blobcr-checkpoint'):
            if name in tr.text and state in (None, tr.get_attribute(
                    'data-state')):
                return tr
    first = wait_for('checkpoint %s listed' % name, shown, driver=browser)
    pending = first.get_attribute('data-state') == 'pending'
    # A mark on this page: a reload would lose it.
    browser.execute_script('window.blobcrSamePage = true;')
    row = wait_for('checkpoint %s stable' % name, lambda: shown('stable'),
                   timeout=120, driver=browser)
    assert browser.execute_script('return window.blobcrSamePage === true;')
    snapshot = row.get_attribute('data-object-id')

    def drawn_stable():
        return browser.find_elements(
            By.CSS_SELECTOR, 'svg.blobcr-chain-picture circle[data-id="%s"]'
            '[data-state="stable"]' % snapshot)
    # The picture follows the table (redrawn by the panel's script).
    wait_for('checkpoint %s stable in the picture' % name, drawn_stable,
             timeout=30, driver=browser)
    # And the tree is drawn as a fresh page draws it: the settled
    # version may have moved under its parent, and its neighbours with it.
    updated = wait_for('the rows redrawn', lambda: (
        lambda r: r if r[snapshot][1] == 'stable' else None)(rows(browser)),
        driver=browser)
    print('checkpoint %s: first shown %s' % (
        name, 'pending, then updated by ajax (picture redrawn %s times)'
        % browser.find_element(By.CSS_SELECTOR, 'div.blobcr-picture')
        .get_attribute('data-redrawn') if pending else 'stable'))
    browser.refresh()
    wait_for('the panel again', lambda: browser.find_elements(
        By.CSS_SELECTOR, 'table#chains'), driver=browser)
    assert list(rows(browser).items()) == list(updated.items())
    row = shown('stable')
    return row


def restart_group(browser, horizon, api, job, group_snapshot, prefix):
    """Restart the job from the panel (no boot); the new volumes."""
    from selenium.webdriver.common.by import By
    before = {v['id'] for v in api.get('/volumes').json()['volumes']}
    browser.get(horizon + '/project/checkpoints/')
    browser.find_element(By.CSS_SELECTOR, 'a[href$="/group/%s/restart/"]'
                         % job.group).click()
    submit_modal(browser, {'name_prefix': prefix, 'boot': False})

    def made():
        found = [v for v in api.get('/volumes/detail').json()['volumes']
                 if v['id'] not in before and v['name'].startswith(prefix)]
        if len(found) == 2 and all(v['status'] == 'available' and
                                   v['bootable'] == 'true' for v in found):
            return found
    found = wait_for('restarted volumes', made, timeout=120, driver=browser)

    def followed():
        row = browser.find_element(By.CSS_SELECTOR, 'table#groups '
                                   'tr[data-object-id="%s"]' % group_snapshot)
        return row if row.get_attribute('data-restart') == 'done' else None
    row = wait_for('the restart followed to its end', followed, timeout=120,
                   driver=browser)
    assert 'done: 2 volumes' in row.text, row.text
    return found


def clean_up(stack, api, job):
    """What the test made beside the job: the job's group goes only
    without other snapshots of its volumes, and clones of them.
    """
    snapshots = [s['id'] for s in api.get(
        '/snapshots/detail', microversion='3.14').json()['snapshots']
        if s['volume_id'] in job.volumes and not s.get('group_snapshot_id')]
    volumes = [v['id'] for v in api.get('/volumes/detail').json()['volumes']
               if job.suffix in (v['name'] or '')
               and v['id'] not in job.volumes]
    for snapshot in snapshots:
        api.delete('/snapshots/%s' % snapshot)
    for volume in volumes:
        api.delete('/volumes/%s' % volume)
    for snapshot in snapshots:
        stack.wait_status('snapshot', snapshot, 'deleted')
    for volume in volumes:
        stack.wait_status('volume', volume, 'deleted')


def test_panel_draws_chains_takes_a_checkpoint_and_restarts(
        openstack_cloud, cinder_hosts, horizon, browser, tmp_path):
    stack, hosts = openstack_cloud, cinder_hosts['local']
    api = stack.block_storage()
    with Job(stack, hosts) as job:
        try:
            members, group_snapshot, clone = make_chain(stack, api, job)
            first = job.volumes[0]
            attachment = Attachment(stack, first, hosts.compute[0])
            try:
                with open(attachment.path, 'r+b') as f:
                    f.write(b'after the group checkpoint'.ljust(4096))
                    f.flush()
                    os.fsync(f.fileno())
                login(browser, horizon)
                check_chain(browser, job, members, group_snapshot, clone)
                # Live: the volume is attached.
                row = take_checkpoint(browser, horizon, first,
                                      'browser-%s' % job.suffix)
                cells = [td.text for td in row.find_elements('tag name',
                                                             'td')]
                png = browser.get_screenshot_as_png()
            finally:
                attachment.detach()
            # The version after the group's, taken by the operator, with
            # the driver's ack time and quiesce mode.
            parent = int(members[first]['metadata']['blobcr:version'])
            assert row.get_attribute('data-version') == str(parent + 1)
            assert cells[7] == 'operator'
            assert float(cells[4]) > 0
            assert cells[6] in ('fsfreeze', 'suspend', 'none')
            taken = api.get('/snapshots/%s' % row.get_attribute(
                'data-object-id')).json()['snapshot']
            assert taken['volume_id'] == first
            assert taken['metadata']['blobcr:host'] == hosts.compute[0]
            (tmp_path / 'dashboard-checkpoints.png').write_bytes(png)
            check_png(png)
            if os.environ.get(SCREENSHOT_ENV):
                shutil.copyfile(tmp_path / 'dashboard-checkpoints.png',
                                os.environ[SCREENSHOT_ENV])

            stack.wait_status('volume', first, 'available')
            found = restart_group(browser, horizon, api, job,
                                  group_snapshot, 'again-%s' % job.suffix)
            assert {v['metadata']['blobcr:restart_snapshot']
                    for v in found} == {s['id'] for s in members.values()}
        finally:
            clean_up(stack, api, job)
