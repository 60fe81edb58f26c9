"""The Checkpoints panel: who may see it is who may see Volumes."""

from django.utils.translation import gettext_lazy as _
import horizon

from blobcr_dashboard.checkpoints import rules


class Checkpoints(horizon.Panel):
    name = _("Checkpoints")
    slug = 'checkpoints'
    permissions = rules.VOLUME_SERVICE
    policy_rules = rules.LIST
