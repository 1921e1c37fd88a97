"""Data for Ansible that Ansible must never template: YAML in which strings carry the `!unsafe` tag.

Every value a tenant or the platform sets reaches Ansible so (a run's extra vars, an inventory or an extra-vars
file the CLI writes for a run by hand); only the operator's site variables are templates by design."""

from __future__ import annotations

import yaml


class Unsafe(str):
    """A string Ansible must never template (dumped with YAML's `!unsafe` tag)."""


class _UnsafeDumper(yaml.SafeDumper):
    pass


_UnsafeDumper.add_representer(Unsafe, lambda dumper, value: dumper.represent_scalar("!unsafe", str(value)))


def mark_unsafe(value):
    """`value` with every string, key or value, marked Unsafe."""
    if isinstance(value, str):
        return Unsafe(value)
    if isinstance(value, dict):  # keys too: `dict2items` turns a key into a value a template renders
        return {mark_unsafe(k): mark_unsafe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mark_unsafe(v) for v in value]
    return value


def dump(value) -> str:
    """YAML of `value`; the strings marked Unsafe carry `!unsafe`, the others are plain."""
    return yaml.dump(value, Dumper=_UnsafeDumper, default_flow_style=False, width=1 << 30)


def unsafe_vars_yaml(variables: dict) -> str:
    """Extra vars as YAML in which every string, key or value, is `!unsafe`."""
    return dump(mark_unsafe(variables))


def playbook_inventory(served: dict) -> dict:
    """An instance's served inventory (GET /v1/instances/{id}/inventory) as `ansible-playbook -i FILE` must read
    it: every variable's value unsafe (hosts' and the run's, which hold tenant parameters), and the operator's
    `site_vars` in `all.vars` below the run's own, as in the platform's runs (the catalog wins)."""
    group = served.get("all") or {}
    run_vars = {k: mark_unsafe(v) for k, v in (group.get("vars") or {}).items()}
    return {"all": {
        "hosts": {host: {k: mark_unsafe(v) for k, v in (hostvars or {}).items()}
                  for host, hostvars in (group.get("hosts") or {}).items()},
        "children": group.get("children") or {},
        "vars": {**(served.get("site_vars") or {}), **run_vars},
    }}
