#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: rke2_kubeconfig
short_description: Read an RKE2 server's admin kubeconfig, pointed at the server's own address
version_added: "0.1.0"
description:
  - On an RKE2 server, reads the admin kubeconfig RKE2 writes (O(path)) and returns it in RV(kubeconfig) with its
    C(server) URL, C(https://127.0.0.1:6443) as RKE2 writes it, rewritten to C(https://<server_address>:<port>),
    so that it works from another host. Everything else is returned as RKE2 wrote it.
  - Changes nothing; the file on the host stays as it is.
  - RV(kubeconfig) is the cluster's admin credential. The platform hands it to a tenant through its runtime-secret
    route (the adapter's C(credentials)) without writing it anywhere; a playbook that registers this module's
    result should keep it out of its output (C(no_log)).
author:
  - gpuaas.apps developers (@gpuaas)
options:
  server_address:
    description:
      - The address clients reach the server's Kubernetes API at (an IPv4 or IPv6 address, or a name the server's
        certificate covers).
      - Default, the C(node-ip) of O(config) (the first address of a dual-stack list), which RKE2's serving
        certificate always covers; without one, this host's address towards its default route.
    type: str
  port:
    description: The port of the Kubernetes API.
    type: int
    default: 6443
  path:
    description: The admin kubeconfig RKE2 writes on a server.
    type: path
    default: /etc/rancher/rke2/rke2.yaml
  config:
    description: RKE2's configuration file, read for its C(node-ip) alone.
    type: path
    default: /etc/rancher/rke2/config.yaml
extends_documentation_fragment:
  - gpuaas.apps.attributes.read_only
"""

EXAMPLES = r"""
- name: Read the admin kubeconfig of the first server, pointed at its node IP
  gpuaas.apps.rke2_kubeconfig:
  register: admin
  no_log: true
  delegate_to: "{{ groups['rke2_servers'][0] }}"
  run_once: true

# As an app's adapter declares it (adapters/rke2.yml, credentials): the platform runs it ad hoc on a server.
- name: Point it at the address the platform reaches the server at
  gpuaas.apps.rke2_kubeconfig:
    server_address: "{{ ansible_host }}"
  register: admin
  no_log: true
"""

RETURN = r"""
kubeconfig:
  description: The admin kubeconfig, its C(server) URL rewritten to RV(server).
  returned: success
  type: str
  sample: "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: LS0t...\n    server: https://10.0.0.11:6443\n..."
server:
  description: The Kubernetes API URL RV(kubeconfig) names.
  returned: success
  type: str
  sample: https://10.0.0.11:6443
"""

import re  # noqa: E402 - Ansible modules import after their docs
import socket  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

# A cluster's `server:` key; `tls-server-name:` and the like do not match.
SERVER_LINE = re.compile(r"^([ \t]*server:[ \t]*)\S+[ \t]*$", re.M)
NODE_IP = re.compile(r"^node-ip:[ \t]*([^\n#]*?)[ \t]*(?:#.*)?$", re.M)
NODE_IP_BLOCK_LIST = re.compile(r"^node-ip:[ \t]*\n[ \t]*-[ \t]*([^\s#]+)", re.M)
# Addresses reserved for documentation (RFC 5737, RFC 3849): a UDP socket "connected" to one sends nothing, and
# names the source address the host's routes would use.
ROUTE_PROBES = ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1"))


def server_url(address, port):
    host = address.strip("[]")
    return "https://%s:%d" % ("[%s]" % host if ":" in host else host, port)


def rewrite(kubeconfig, server):
    """The kubeconfig with every cluster's server URL replaced by `server`; ValueError without one."""
    rewritten, count = SERVER_LINE.subn(lambda match: match.group(1) + server, kubeconfig)
    if not count:
        raise ValueError("it names no server")
    return rewritten


def node_ip(config):
    """The first address of config.yaml's node-ip (a scalar, a comma-separated dual-stack pair, or a list), or None."""
    block = NODE_IP_BLOCK_LIST.search(config)
    if block:
        return block.group(1).strip("'\"")
    found = NODE_IP.search(config)
    value = found.group(1).strip().strip("[]").split(",")[0].strip().strip("'\"") if found else ""
    return value or None


def default_route_address():
    for family, probe in ROUTE_PROBES:
        probe_socket = socket.socket(family, socket.SOCK_DGRAM)
        try:
            probe_socket.connect((probe, 9))
            return probe_socket.getsockname()[0]
        except (OSError, socket.error):
            continue
        finally:
            probe_socket.close()
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            server_address=dict(type="str"),
            port=dict(type="int", default=6443),
            path=dict(type="path", default="/etc/rancher/rke2/rke2.yaml"),
            config=dict(type="path", default="/etc/rancher/rke2/config.yaml"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    address = params["server_address"]
    if not address:
        try:
            # config.yaml also holds the cluster token: only node-ip is taken from it.
            with open(params["config"]) as handle:
                address = node_ip(handle.read())
        except (IOError, OSError):
            address = None
        address = address or default_route_address()
    if not address:
        module.fail_json(msg="cannot tell this server's address: %s names no node-ip and the host has no default "
                             "route; set server_address" % params["config"])
    try:
        with open(params["path"]) as handle:
            original = handle.read()
    except (IOError, OSError) as error:
        module.fail_json(msg="cannot read the admin kubeconfig %s: %s (is this an RKE2 server that has started?)"
                             % (params["path"], error.strerror))
    server = server_url(address, params["port"])
    try:
        kubeconfig = rewrite(original, server)
    except ValueError as error:
        module.fail_json(msg="%s is not a kubeconfig RKE2 wrote: %s" % (params["path"], error))
    module.exit_json(changed=False, kubeconfig=kubeconfig, server=server)


if __name__ == "__main__":
    main()
