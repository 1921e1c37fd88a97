#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: host_facts
short_description: Describe a host in one module run, with the facts the collection's roles read
version_added: "0.1.0"
description:
  - Sets the facts the collection's roles read, under the names and with the values C(ansible.builtin.setup)
    gives them, so a role works the same after either. C(ansible_hostname), C(ansible_default_ipv4) (the
    address, interface and gateway of the route to a public address, as C(ip -4 route get) answers; nothing
    is sent), C(ansible_processor_vcpus), C(ansible_memtotal_mb), C(ansible_distribution),
    C(ansible_distribution_version) and C(ansible_distribution_major_version).
  - With O(gpus), also lists the NVIDIA GPUs by device minor number (RV(gpu_minors), RV(gpu_count)); with
    O(packages), also reports the installed packages and the apt sources files. These are return values, not
    facts, because a fact cache would keep them past the run, and a later run must not decide what to install
    from an old list.
  - Why not C(setup)? Its network and hardware collectors read every interface, mount and device, and import
    the whole facts library. On three test hosts at once that took 1.5-1.65 s more than a task that does
    nothing, against 0.8-1.15 s for this module with the GPU count and the packages. The roles need a handful
    of facts per run, and this module reads only those, with the GPU count and the installed packages in the
    same module run (each module run is an SSH round trip and a Python start on the host).
  - Changes nothing.
author:
  - gpuaas.apps developers (@gpuaas)
options:
  gpus:
    description:
      - List the NVIDIA GPUs with O(nvidia_smi) (C(nvidia-smi -q -x)), each by its device minor number M, which
        names its device file C(/dev/nvidiaM). The minor is not always nvidia-smi's index (the index follows PCI
        bus order, the minor the driver's probe order), and a GPU that fell off the bus leaves a hole in the minors.
      - A host without O(nvidia_smi), or where it fails or prints no XML the module can read, has 0 (a failure is
        reported as a warning).
      - A GPU without a minor number (such as C(N/A)) has no device file to offer, so it is left out of
        RV(gpu_minors) and RV(gpu_count), with a warning.
    type: bool
    default: false
  nvidia_smi:
    description: The C(nvidia-smi) to run, by name (looked up in the path) or absolute path.
    type: str
    default: nvidia-smi
  packages:
    description:
      - Report the installed packages (C(dpkg-query)) and the files in C(/etc/apt/sources.list.d), from
        which the roles decide whether apt has anything to do.
    type: bool
    default: false
  read:
    description:
      - Text files to read, by absolute path, into RV(file_contents), in the same module run. Meant for small
        records a role keeps, not for secrets (the contents are part of the module's result). A file that exists
        but cannot be read, or is not UTF-8 text, fails the module.
    type: list
    elements: path
    default: []
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
notes:
  - Written for Linux hosts with C(/proc), the C(ip) command and, with O(packages), dpkg.
  - With O(gpus), C(nvidia-smi -q -x) took 0.1-0.135 s on an H100 host against 0.02 s for the
    C(--query-gpu) form, which has no field for the minor number.
extends_documentation_fragment:
  - gpuaas.apps.attributes.read_only
"""

EXAMPLES = r"""
- name: Describe the hosts, count the workers' GPUs, and read what is installed
  gpuaas.apps.host_facts:
    gpus: "{{ inventory_hostname in groups['slurm_workers'] }}"
    packages: true
  register: host

- name: Show a worker's node line
  ansible.builtin.debug:
    msg: "CPUs={{ ansible_processor_vcpus }} RealMemory={{ ansible_memtotal_mb }} Gres=gpu:{{ host.gpu_count }}"

- name: Show a worker's gres.conf lines, one per GPU device file
  ansible.builtin.debug:
    msg: "NodeName={{ ansible_hostname }} Name=gpu File=/dev/nvidia{{ item }}"
  loop: "{{ host.gpu_minors }}"
"""

RETURN = r"""
ansible_facts:
  description: The facts, also set as variables of the host.
  returned: always
  type: dict
  contains:
    ansible_hostname:
      description: The host name up to its first dot.
      type: str
      sample: gpu07
    ansible_default_ipv4:
      description:
        - The route to a public address, as C(ip -4 route get) answers; empty when the host has no such route.
      type: dict
      sample: {address: 10.0.0.7, interface: eth0, gateway: 10.0.0.1}
    ansible_processor_vcpus:
      description: Logical CPUs (the C(processor) entries of C(/proc/cpuinfo)).
      type: int
      sample: 64
    ansible_memtotal_mb:
      description: C(MemTotal) of C(/proc/meminfo), in MiB.
      type: int
      sample: 515890
    ansible_distribution:
      description: The distribution's name, as C(setup) spells it.
      type: str
      sample: Debian
    ansible_distribution_version:
      description: The distribution's version.
      type: str
      sample: "12.11"
    ansible_distribution_major_version:
      description: The version up to its first dot.
      type: str
      sample: "12"
gpu_count:
  description: NVIDIA GPUs that O(nvidia_smi) lists with a minor number, the length of RV(gpu_minors).
  returned: with O(gpus)
  type: int
  sample: 7
gpu_minors:
  description:
    - The device minor number of each GPU (its device file is C(/dev/nvidiaM)), in the order nvidia-smi lists
      them; a GPU without one is left out.
  returned: with O(gpus)
  type: list
  elements: int
  sample: [0, 1, 2, 4, 5, 6, 7]
installed_packages:
  description:
    - One line per package dpkg knows, C(<source package> <status><package> <version>), as the collection's
      filters C(gpuaas.apps.deb_request) and C(gpuaas.apps.deb_unsatisfied) read them.
  returned: with O(packages)
  type: list
  elements: str
  sample: ["munge ii munge 0.5.15-2"]
apt_source_files:
  description: The files in C(/etc/apt/sources.list.d), by full path.
  returned: with O(packages)
  type: list
  elements: str
  sample: [/etc/apt/sources.list.d/gpuaas.list]
file_contents:
  description: The text of each file in O(read), by path; V(null) for a file that does not exist.
  returned: with O(read)
  type: dict
  sample: {/etc/slurm/gpuaas-nodes.json: "{\"nodes\": {}}\n"}
"""

import errno  # noqa: E402 - Ansible modules import after their documentation
import os  # noqa: E402
import platform  # noqa: E402
from xml.etree import ElementTree  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.common.sys_info import get_distribution, get_distribution_version  # noqa: E402
from ansible_collections.gpuaas.apps.plugins.module_utils.dpkg import installed_packages  # noqa: E402

# Any public address will do: `ip route get` only looks the route up.
ROUTE_PROBE = "8.8.8.8"
APT_SOURCES_DIR = "/etc/apt/sources.list.d"


def default_ipv4(module):
    """The address, interface and gateway `ip -4 route get` names for a public address; {} without a route."""
    ip = module.get_bin_path("ip")
    if not ip:
        return {}
    rc, out, dummy = module.run_command([ip, "-4", "route", "get", ROUTE_PROBE])
    words = out.split()
    if rc != 0 or not words or words[0] != ROUTE_PROBE:
        return {}
    keys = {"src": "address", "dev": "interface", "via": "gateway"}
    return dict((keys[word], words[i + 1]) for i, word in enumerate(words[:-1]) if word in keys)


def proc_lines(path, prefix):
    with open(path) as f:
        return [line for line in f if line.startswith(prefix)]


def logical_cpus():
    return len(proc_lines("/proc/cpuinfo", "processor")) or os.cpu_count() or 1


def memtotal_mb():
    # "MemTotal:       16380452 kB"
    return int(proc_lines("/proc/meminfo", "MemTotal:")[0].split()[1]) // 1024


def read_record(module, path):
    """The text of ``path``, None when it does not exist. Any other failure fails the module: a record that
    cannot be read must not pass for an empty one."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (IOError, OSError) as error:
        if error.errno == errno.ENOENT:
            return None
        module.fail_json(msg="cannot read %s: %s" % (path, error))
    except UnicodeDecodeError as error:
        module.fail_json(msg="%s is not UTF-8 text: %s" % (path, error))


def gpu_minors(module, nvidia_smi):
    """The device minor number of each GPU nvidia-smi lists, in its order; [] without nvidia-smi or when it fails.
    The minor names the device file (/dev/nvidiaM), which nvidia-smi's index need not match."""
    path = nvidia_smi if os.path.isabs(nvidia_smi) else module.get_bin_path(nvidia_smi)
    if not path or not os.access(path, os.X_OK):
        return []
    rc, out, err = module.run_command([path, "-q", "-x"])
    if rc != 0:
        module.warn("%s failed (rc %d), so this host counts 0 GPUs: %s" % (path, rc, (err or out).strip()))
        return []
    try:
        # The host's own nvidia-smi wrote it (defusedxml is no module on the hosts); ElementTree resolves no
        # external entity.
        log = ElementTree.fromstring(out)  # noqa: S314
    except ElementTree.ParseError as error:
        module.warn("%s -q -x printed no XML this module can read (%s), so this host counts 0 GPUs" % (path, error))
        return []
    minors = []
    for gpu in log.findall("gpu"):
        minor = (gpu.findtext("minor_number") or "").strip()
        try:
            minors.append(int(minor))
        except ValueError:
            # Without a minor there is no device file to name in gres.conf.
            module.warn("GPU %s (%s) has no minor number (%r), so it is not counted"
                        % (gpu.get("id"), gpu.findtext("product_name"), minor))
    return minors


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpus=dict(type="bool", default=False),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            packages=dict(type="bool", default=False),
            read=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    version = get_distribution_version() or ""
    facts = dict(
        ansible_hostname=platform.node().split(".")[0],
        ansible_default_ipv4=default_ipv4(module),
        ansible_processor_vcpus=logical_cpus(),
        ansible_memtotal_mb=memtotal_mb(),
        ansible_distribution=get_distribution() or "",
        ansible_distribution_version=version,
        ansible_distribution_major_version=version.split(".")[0],
    )
    result = dict(changed=False, ansible_facts=facts)
    if module.params["gpus"]:
        result["gpu_minors"] = gpu_minors(module, module.params["nvidia_smi"])
        result["gpu_count"] = len(result["gpu_minors"])
    if module.params["packages"]:
        result["installed_packages"] = installed_packages(module)
        sources = os.listdir(APT_SOURCES_DIR) if os.path.isdir(APT_SOURCES_DIR) else []
        result["apt_source_files"] = sorted(os.path.join(APT_SOURCES_DIR, name) for name in sources)
    if module.params["read"]:
        relative = [path for path in module.params["read"] if not os.path.isabs(path)]
        if relative:
            module.fail_json(msg="read: %s is not an absolute path" % relative[0])
        result["file_contents"] = dict((path, read_record(module, path)) for path in module.params["read"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
