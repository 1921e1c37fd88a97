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
  - The token is read from the environment (E(GPUAAS_TOKEN)) or from a file (O(token_file)), never from the
    plugin's configuration, so inventory files hold no secret.
  - Lifecycle playbooks expect one instance per run (one controller in C(slurm_controller)); give O(instances)
    one name, or use one inventory source per instance. Two instances whose hosts share a node name cannot be
    in one inventory; the plugin says so.
  - The file must end in C(gpuaas.yml) or C(gpuaas.yaml).
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
  instances:
    description: Names (or ids) of the instances to include; default every instance of the project.
    type: list
    elements: str
    default: []
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
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402

from ansible.errors import AnsibleError  # noqa: E402
from ansible.module_utils.common.text.converters import to_native  # noqa: E402
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError  # noqa: E402
from ansible.module_utils.six.moves.urllib.parse import urlencode  # noqa: E402
from ansible.module_utils.urls import open_url  # noqa: E402
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable  # noqa: E402


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

    def _read_token(self):
        path = self.get_option("token_file")
        if path:
            try:
                with open(path) as f:
                    token = f.read().strip()
            except (IOError, OSError) as exc:
                raise AnsibleError("gpuaas inventory: cannot read token_file %s: %s" % (path, to_native(exc))) from None
        else:
            token = os.environ.get("GPUAAS_TOKEN", "").strip()
        if not token:
            raise AnsibleError("gpuaas inventory: no API token; set GPUAAS_TOKEN or token_file")
        return token

    def _get(self, path, query=None):
        url = self.get_option("url").rstrip("/") + path + ("?" + urlencode(query) if query else "")
        try:
            headers = {"Authorization": "Bearer " + self._api_token, "Accept": "application/json"}
            response = open_url(url, headers=headers, validate_certs=self.get_option("validate_certs"),
                                timeout=self.get_option("timeout"))
            return json.loads(response.read())
        except HTTPError as exc:
            reason = self._reason(exc)
            raise AnsibleError("gpuaas inventory: GET %s answered %s: %s" % (path, exc.code, reason)) from None
        except URLError as exc:
            raise AnsibleError("gpuaas inventory: cannot reach %s: %s" % (url, to_native(exc.reason))) from None

    @staticmethod
    def _reason(exc):
        try:
            error = json.loads(exc.read())["error"]
            return "%s (%s; correlation id %s)" % (error["message"], error["code"], error.get("correlation_id"))
        except (ValueError, KeyError, TypeError):
            return to_native(exc.reason)

    def _fetch(self):
        """[(instance, inventory)] for the selected instances of the project, every page read."""
        self._api_token = self._read_token()
        wanted = set(self.get_option("instances"))
        statuses = set(self.get_option("statuses"))
        project = self.get_option("project_id")
        selected, cursor = [], None
        while True:
            query = {"limit": self.get_option("page_size")}
            if cursor:
                query["cursor"] = cursor
            page = self._get("/v1/projects/%s/instances" % project, query)
            selected += [i for i in page["items"] if i["status"] in statuses
                         and (not wanted or i["name"] in wanted or i["id"] in wanted)]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        missing = wanted - {i["name"] for i in selected} - {i["id"] for i in selected}
        if missing:
            raise AnsibleError("gpuaas inventory: no instance %s in project %s with status in %s"
                               % (", ".join(sorted(missing)), project, sorted(statuses)))
        return [(i, self._get("/v1/instances/%s/inventory" % i["id"])) for i in selected]

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
            for name in hosts:
                variables = self.inventory.get_host(name).get_vars()
                self._set_composite_vars(self.get_option("compose"), variables, name, strict=strict)
                self._add_host_to_composed_groups(self.get_option("groups"), variables, name, strict=strict)
                self._add_host_to_keyed_groups(self.get_option("keyed_groups"), variables, name, strict=strict)
