# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # How an RKE2 module reaches the Kubernetes API (module_utils/rke2.py KUBE_ARGUMENT_SPEC):
    # extends_documentation_fragment: [gpuaas.apps.rke2.kubectl]
    KUBECTL = r"""
options:
  kubectl:
    description: The kubectl to run (the one RKE2 unpacks).
    type: path
    default: /var/lib/rancher/rke2/bin/kubectl
  kubeconfig:
    description: The admin kubeconfig.
    type: path
    default: /etc/rancher/rke2/rke2.yaml
"""

    # How an RKE2 module reaches etcd on a server (module_utils/rke2.py ETCD_ARGUMENT_SPEC):
    # extends_documentation_fragment: [gpuaas.apps.rke2.etcd]
    ETCD = r"""
options:
  endpoint:
    description: The etcd client URL to talk to (the local member by default).
    type: str
    default: https://127.0.0.1:2379
  ca_cert:
    description: CA certificate of etcd's serving certificates.
    type: path
    default: /var/lib/rancher/rke2/server/tls/etcd/server-ca.crt
  client_cert:
    description: Client certificate etcd accepts.
    type: path
    default: /var/lib/rancher/rke2/server/tls/etcd/server-client.crt
  client_key:
    description: Its key.
    type: path
    default: /var/lib/rancher/rke2/server/tls/etcd/server-client.key
  timeout:
    description: Seconds to wait for each etcd call (a member that does not answer in time counts as unhealthy).
    type: int
    default: 5
"""
