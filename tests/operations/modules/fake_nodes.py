#!/usr/bin/python
# Test double of a scheduler status module (there is no Slurm in these tests): returns the node list
# stored in a JSON file, in the shape gpuaas.apps.slurm_info returns.
from __future__ import annotations

import json

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={"path": {"type": "path", "required": True}}, supports_check_mode=True)
    with open(module.params["path"]) as f:
        module.exit_json(changed=False, nodes=json.load(f))


if __name__ == "__main__":
    main()
