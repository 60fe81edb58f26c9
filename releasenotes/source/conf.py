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

"""Sphinx configuration of the release notes: ``tox -e releasenotes``."""

project = 'BlobCR for OpenStack Release Notes'
copyright = '2026, The BlobCR for OpenStack Authors'

extensions = ['openstackdocstheme', 'reno.sphinxext']

openstackdocs_repo_name = 'x/blobcr-openstack'
openstackdocs_bug_project = 'blobcr-openstack'
openstackdocs_bug_tag = 'releasenotes'
openstackdocs_auto_name = False

html_theme = 'openstackdocs'
html_static_path = ['_static']
