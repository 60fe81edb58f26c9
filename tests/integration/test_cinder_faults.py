"""Bad input on the real Cinder stack (issue 9): Keystone tokens that
are garbage, revoked or expired are refused with a clear error and
nothing is created. The ``openstack`` CLI does what a user does.

(The full-backend and agent-restart cases are being added here.)
"""

import datetime
import os
import time
import uuid


def name(prefix):
    return '%s-%s' % (prefix, uuid.uuid4().hex[:6])


# -- Keystone tokens ---------------------------------------------------------

def with_token(stack, token, *args):
    """``openstack`` as a user holding only ``token``: (status, stderr)
    against Keystone (the token plugin rescopes it) and against Cinder
    directly (the token sent as it is to cinder-api).
    """
    import subprocess
    env = {k: v for k, v in stack.env().items()
           if k not in ('OS_USERNAME', 'OS_PASSWORD', 'OS_USER_DOMAIN_NAME',
                        'OS_AUTH_TYPE')}
    project = stack.session('demo').get_project_id()
    runs = {
        'keystone': dict(env, OS_AUTH_TYPE='token', OS_TOKEN=token),
        'cinder': dict({k: v for k, v in env.items() if k not in (
            'OS_PROJECT_NAME', 'OS_PROJECT_DOMAIN_NAME', 'OS_AUTH_URL')},
            OS_AUTH_TYPE='admin_token', OS_TOKEN=token,
            OS_ENDPOINT='%s/v3/%s' % (stack.cinder_url, project),
            OS_VOLUME_API_VERSION='3'),
    }
    result = {}
    for where, run_env in runs.items():
        proc = subprocess.run(
            [os.path.join(os.path.dirname(os.path.abspath(
                __import__('sys').executable)), 'openstack')] + list(args),
            env=run_env, capture_output=True, text=True, timeout=120,
            stdin=subprocess.DEVNULL)
        result[where] = (proc.returncode, proc.stdout + proc.stderr)
    return result


def assert_refused(stack, token, label):
    volume = name(label)
    result = with_token(stack, token, 'volume', 'create', '--size', '1',
                        '--type', 'harness-fake', volume)
    for where, (code, out) in result.items():
        assert code != 0, (where, out)
        assert 'Traceback' not in out, (where, out)
    # Keystone will not rescope it: 401, or 404 for a token it cannot
    # find ("Could not recognize Fernet token", "Failed to validate").
    code, out = result['keystone']
    assert 'HTTP 401' in out or 'HTTP 404' in out, out
    # Cinder (keystonemiddleware) will not take it: 401.
    code, out = result['cinder']
    assert '401' in out and 'requires authentication' in out, out
    listed = stack.openstack('volume', 'list', '--all-projects',
                             user='admin')
    assert volume not in [v['Name'] for v in listed]
    return {where: out for where, (_, out) in result.items()}


def test_wrong_revoked_and_expired_tokens(openstack_cloud):
    stack = openstack_cloud
    # Garbage.
    assert_refused(stack, 'gAAAAAB' + uuid.uuid4().hex * 3, 'garbage')

    # Revoked by its user before it was used.
    token = stack.openstack('token', 'issue')['id']
    stack.openstack('token', 'revoke', token, json=False)
    assert_refused(stack, token, 'revoked')

    # Expired: Keystone caps a token's life at that of the application
    # credential it was issued from (keystone/token/provider.py), so a
    # credential that expires in seconds gives a token that does too.
    expires = datetime.datetime.utcnow() + datetime.timedelta(seconds=12)
    cred = stack.openstack('application', 'credential', 'create',
                           '--expiration',
                           expires.strftime('%Y-%m-%dT%H:%M:%S'),
                           name('short'))
    try:
        env = {k: v for k, v in stack.env().items()
               if k not in ('OS_USERNAME', 'OS_PASSWORD',
                            'OS_USER_DOMAIN_NAME', 'OS_PROJECT_NAME',
                            'OS_PROJECT_DOMAIN_NAME')}
        import json
        import subprocess
        issued = json.loads(subprocess.run(
            [os.path.join(os.path.dirname(os.path.abspath(
                __import__('sys').executable)), 'openstack'),
             'token', 'issue', '-f', 'json'],
            env=dict(env, OS_AUTH_TYPE='v3applicationcredential',
                     OS_APPLICATION_CREDENTIAL_ID=cred['ID'],
                     OS_APPLICATION_CREDENTIAL_SECRET=cred['Secret']),
            capture_output=True, text=True, check=True,
            timeout=120).stdout)
        ends = datetime.datetime.fromisoformat(
            issued['expires'].replace('Z', '+00:00')).replace(tzinfo=None)
        assert ends <= expires, issued
        time.sleep(max(0, (ends - datetime.datetime.utcnow())
                       .total_seconds()) + 1)
        assert_refused(stack, issued['id'], 'expired')
    finally:
        stack.openstack('application', 'credential', 'delete', cred['ID'],
                        json=False)
