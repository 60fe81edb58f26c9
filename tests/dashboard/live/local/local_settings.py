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

"""Horizon's local settings for the browser test's server
(tests/integration/test_dashboard_browser.py), from its environment.

openstack_dashboard.settings imports ``local.local_settings`` with its own
directory appended to sys.path: with this directory first on PYTHONPATH,
this module is the one it finds, and nothing is written into the
installed Horizon (its default would generate a secret key file there).
"""

import os

SECRET_KEY = os.environ['BLOBCR_HORIZON_SECRET_KEY']
OPENSTACK_KEYSTONE_URL = os.environ['BLOBCR_HORIZON_KEYSTONE_URL']
STATIC_ROOT = os.environ['BLOBCR_HORIZON_STATIC_ROOT']
BLOBCR_RESTART_DIR = os.environ['BLOBCR_HORIZON_RESTART_DIR']
DEBUG = False
ALLOWED_HOSTS = ['127.0.0.1']
SESSION_ENGINE = 'django.contrib.sessions.backends.signed_cookies'
CACHES = {'default': {
    'BACKEND': 'django.core.cache.backends.locmem.LocMemCache'}}
OPENSTACK_ENDPOINT_TYPE = 'publicURL'
