# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: run_secrets
short_description: The secrets a gpuaas control service run of the instance gets, read as a job starts
version_added: "0.1.0"
description:
  - For a job against an instance of the gpuaas control service (an AWX job whose inventory comes from the
    C(gpuaas.apps.gpuaas) inventory plugin), reads once per run what the service's own runs of that instance get
    beyond the inventory (its secrets, the adapter's C(secrets) such as Slurm's C(munge_key), and the access map)
    from the audited route C(POST /v1/instances/{id}/run-secrets) (permission C(apps.instance.run_secrets.read)),
    and gives them to every host, C(localhost) too, as variables of the group C(all). They are data Ansible never
    templates, as in the service's runs.
  - The instance is the one named by the hosts' C(gpuaas_instance_id) (the inventory plugin sets it); an inventory
    without it gets nothing, one with several instances is refused (a lifecycle run is one instance's).
  - Runs only while tasks run, never while an inventory is read (O(stage) is V(task)), so C(ansible-inventory)
    and AWX's inventory sync never see the secrets, even with the plugin enabled.
  - Enable it with E(ANSIBLE_VARS_ENABLED) (C(host_group_vars,gpuaas.apps.run_secrets)); the token comes from
    E(GPUAAS_TOKEN) or O(token_file), never from configuration (the AWX credential type of docs/awx.md injects
    all three).
author:
  - gpuaas.apps developers (@gpuaas)
options:
  stage:
    description:
      - When the plugin runs. Only V(task) (while tasks run), so that no inventory read ever includes a secret.
    type: str
    default: task
    choices: [task]
  url:
    description: Base URL of the control service.
    type: str
    env:
      - name: GPUAAS_API
  token_file:
    description:
      - File holding the API token. Without it, E(GPUAAS_TOKEN) is used.
    type: path
    env:
      - name: GPUAAS_TOKEN_FILE
  validate_certs:
    description: Verify the control service's TLS certificate.
    type: bool
    default: true
    env:
      - name: GPUAAS_VALIDATE_CERTS
  timeout:
    description: Seconds to wait for the answer.
    type: int
    default: 30
    env:
      - name: GPUAAS_TIMEOUT
"""

EXAMPLES = r"""
# An AWX job (the credential type in awx/setup.yml injects these), or by hand:
#   GPUAAS_API=https://gpuaas.example.com GPUAAS_TOKEN=... \
#   ANSIBLE_VARS_ENABLED=host_group_vars,gpuaas.apps.run_secrets \
#   ansible-playbook -i hpc.gpuaas.yml playbooks/slurm_reconfigure.yml
"""

# Plugins import after their documentation, as Ansible's own do.
from ansible.errors import AnsibleError  # noqa: E402
from ansible.inventory.group import InventoryObjectType  # noqa: E402
from ansible.plugins.vars import BaseVarsPlugin  # noqa: E402
from ansible.utils.unsafe_proxy import wrap_var  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.plugin_utils.control_service import (  # noqa: E402
    ControlService,
    read_token,
)

WHO = "gpuaas run_secrets"
# (url, instance id) -> the variables: Ansible asks for the group `all`'s variables once per host, task and
# inventory source; the service is asked once per run (each asking is audited).
_READ = {}


class VarsModule(BaseVarsPlugin):

    def get_vars(self, loader, path, entities, cache=True):
        super(VarsModule, self).get_vars(loader, path, entities)
        everyone = [e for e in (entities if isinstance(entities, list) else [entities])
                    if e.base_type is InventoryObjectType.GROUP and e.name == "all"]
        if not everyone:
            return {}
        instances = sorted(set(str(h.vars["gpuaas_instance_id"]) for h in everyone[0].get_hosts()
                               if "gpuaas_instance_id" in h.vars))
        if not instances:
            return {}
        if len(instances) > 1:
            raise AnsibleError("%s: the inventory holds the hosts of instances %s; a run is one instance's (the "
                               "inventory plugin's option instances)" % (WHO, ", ".join(instances)))
        url = self.get_option("url")
        if not url:
            raise AnsibleError("%s: no control service URL; set GPUAAS_API" % WHO)
        key = (url, instances[0])
        if key not in _READ:
            api = ControlService(WHO, url, read_token(WHO, self.get_option("token_file")),
                                 self.get_option("validate_certs"), self.get_option("timeout"))
            _READ[key] = wrap_var(api.call("POST", "/v1/instances/%s/run-secrets" % instances[0])["variables"])
        return _READ[key]
