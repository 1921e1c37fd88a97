# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpuaas
short_description: The app instances of a gpuaas control service project as an inventory
version_added: "0.1.0"
description:
  - Reads the instances of one project from the gpuaas control service's public API and yields, for each, the
    inventory the control service itself runs its playbooks with (C(GET /v1/instances/{id}/inventory)), that is the
    members' hosts, with their allocation addresses, SSH user and port, in the groups the app's adapter
    names (for Slurm, C(slurm_controller) and C(slurm_workers)).
  - Each instance also gets a group of its own, C(gpuaas_<instance name>), and each host the host variables
    C(gpuaas_instance_id), C(gpuaas_instance_name) and C(gpuaas_members) (id, role and status of its members).
  - It also sets the variables the control service's own runs of the instance get, secrets aside (the service
    computes them with the code that plans its runs), so that a job runs with the same packages, image and
    configuration. The run's variables (the catalog's C(vars), the instance's parameters, the catalog's
    C(action_vars) of O(action), the workload image and its signer's key) are data that Ansible never templates,
    as in the service's runs; the operator's site variables sit below them and may be templates. With one instance
    they are variables of the group C(all) (plays on C(localhost) see them too); with several, of each instance's
    own group.
  - Secrets are never in the inventory; the vars plugin C(gpuaas.apps.run_secrets) reads them as a job starts.
  - The token is read from the environment (E(GPUAAS_TOKEN)) or from a file (O(token_file)), never from the
    plugin's configuration, so inventory files hold no secret.
  - Lifecycle playbooks expect one instance per run (one controller in C(slurm_controller)); give O(instances)
    one name, or use one inventory source per instance. Two instances whose hosts share a node name cannot be
    in one inventory; the plugin says so.
  - The file must end in C(gpuaas.yml) or C(gpuaas.yaml). O(url), O(project_id), O(instances) and O(action) may
    come from the environment instead; an AWX inventory source sourced from a project sets its source variables
    as environment variables.
author:
  - gpuaas.apps developers (@gpuaas)
extends_documentation_fragment:
  - constructed
  - inventory_cache
options:
  plugin:
    description: Marks the file as this plugin's.
    required: true
    choices: [gpuaas.apps.gpuaas]
    type: str
  url:
    description: Base URL of the control service.
    type: str
    required: true
    env:
      - name: GPUAAS_API
  token_file:
    description:
      - File holding the API token (a project service account's or a user's). Without it, E(GPUAAS_TOKEN) is used.
    type: path
    env:
      - name: GPUAAS_TOKEN_FILE
  project_id:
    description: The project whose instances to read.
    type: str
    required: true
    env:
      - name: GPUAAS_PROJECT_ID
  instances:
    description: Names (or ids) of the instances to include; default every instance of the project.
    type: list
    elements: str
    default: []
    env:
      - name: GPUAAS_INSTANCES
  action:
    description:
      - The operation kind whose run the inventory describes, such as V(deploy), V(member_add) or V(reconfigure).
        The catalog's C(action_vars) of that kind join the run's variables. Unset, only the variables every action
        shares.
      - Only an app whose adapter declares C(action_vars) needs it (the Slurm, OCI and RKE2 adapters declare none).
        A job template runs one playbook, so such an app takes one inventory source per action that has them.
    type: str
    env:
      - name: GPUAAS_ACTION
  statuses:
    description: Instance statuses to include.
    type: list
    elements: str
    default: [created, starting, running, failed, stopping]
  page_size:
    description: Instances asked for per API page.
    type: int
    default: 100
  validate_certs:
    description: Verify the control service's TLS certificate.
    type: bool
    default: true
  timeout:
    description: Seconds to wait for each API answer.
    type: int
    default: 30
"""

EXAMPLES = r"""
# hpc.gpuaas.yml: the instance "hpc" of one project; GPUAAS_TOKEN holds a service account's token
plugin: gpuaas.apps.gpuaas
url: https://gpuaas.example.com
project_id: 0b6a6f0e-3e0e-4a86-9b47-2f7d5f0c1a11
instances: [hpc]
# With token_file: /run/secrets/gpuaas-token instead of GPUAAS_TOKEN, every running instance, and groups
# by member status (Constructable), add:
#   statuses: [running]
#   keyed_groups:
#     - key: gpuaas_members | map(attribute='status') | first
#       prefix: member
"""

# Plugins import after their documentation, as Ansible's own do.
import re  # noqa: E402

from ansible.errors import AnsibleError  # noqa: E402
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable  # noqa: E402
from ansible.template import trust_as_template  # noqa: E402
from ansible.utils.unsafe_proxy import wrap_var  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.plugin_utils.control_service import (  # noqa: E402
    ControlService,
    read_token,
)


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    NAME = "gpuaas.apps.gpuaas"

    def verify_file(self, path):
        return super(InventoryModule, self).verify_file(path) and path.endswith(("gpuaas.yml", "gpuaas.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super(InventoryModule, self).parse(inventory, loader, path, cache)
        self._read_config_data(path)
        cache_key = self.get_cache_key(path)
        use_cache = self.get_option("cache") and cache
        instances = None
        if use_cache:
            try:
                instances = self._cache[cache_key]
            except KeyError:
                instances = None
        if instances is None:
            instances = self._fetch()
            if self.get_option("cache"):
                self._cache[cache_key] = instances
        self._populate(instances)

    # Reading the API ------------------------------------------------------------------------------

    def _fetch(self):
        """[(instance, inventory)] for the selected instances of the project, every page read."""
        token = read_token("gpuaas inventory", self.get_option("token_file"))
        api = ControlService("gpuaas inventory", self.get_option("url"), token, self.get_option("validate_certs"),
                             self.get_option("timeout"))
        wanted = set(self.get_option("instances"))
        statuses = set(self.get_option("statuses"))
        project = self.get_option("project_id")
        selected, cursor = [], None
        while True:
            query = {"limit": self.get_option("page_size")}
            if cursor:
                query["cursor"] = cursor
            page = api.call("GET", "/v1/projects/%s/instances" % project, query)
            selected += [i for i in page["items"] if i["status"] in statuses
                         and (not wanted or i["name"] in wanted or i["id"] in wanted)]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        missing = wanted - {i["name"] for i in selected} - {i["id"] for i in selected}
        if missing:
            raise AnsibleError("gpuaas inventory: no instance %s in project %s with status in %s"
                               % (", ".join(sorted(missing)), project, sorted(statuses)))
        action = {"action": self.get_option("action")} if self.get_option("action") else None
        return [(i, api.call("GET", "/v1/instances/%s/inventory" % i["id"], action)) for i in selected]

    # Building the inventory -----------------------------------------------------------------------

    def _populate(self, instances):
        owner = {}
        strict = self.get_option("strict")
        for instance, inventory in instances:
            own_group = self.inventory.add_group(re.sub(r"[^A-Za-z0-9_]", "_", "gpuaas_" + instance["name"]))
            hosts = inventory["all"]["hosts"]
            for name, hostvars in hosts.items():
                if owner.setdefault(name, instance["name"]) != instance["name"]:
                    raise AnsibleError("gpuaas inventory: host %s is in instances %s and %s; select one instance "
                                       "(option instances)" % (name, owner[name], instance["name"]))
                self.inventory.add_host(name, group=own_group)
                for key, value in dict(hostvars, gpuaas_instance_name=instance["name"]).items():
                    self.inventory.set_variable(name, key, value)
            for group, members in inventory["all"]["children"].items():
                self.inventory.add_group(group)
                for name in members["hosts"]:
                    self.inventory.add_child(group, name)
            # The site's variables first, so the run's win (as the service passes them: -e @site -e @run).
            run_vars_group = "all" if len(instances) == 1 else own_group
            for key, value in inventory.get("site_vars", {}).items():
                self.inventory.set_variable(run_vars_group, key, _trusted(value))
            for key, value in inventory["all"].get("vars", {}).items():
                self.inventory.set_variable(run_vars_group, key, wrap_var(value))
            for name in hosts:
                variables = self.inventory.get_host(name).get_vars()
                self._set_composite_vars(self.get_option("compose"), variables, name, strict=strict)
                self._add_host_to_composed_groups(self.get_option("groups"), variables, name, strict=strict)
                self._add_host_to_keyed_groups(self.get_option("keyed_groups"), variables, name, strict=strict)


def _trusted(value):
    """The operator's site variable as the service's runs read it from their site_vars file: every string in it,
    keys too, a template Ansible may render."""
    if isinstance(value, dict):
        return dict((_trusted(k), _trusted(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return trust_as_template(value) if isinstance(value, str) else value
