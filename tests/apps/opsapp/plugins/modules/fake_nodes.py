#!/usr/bin/python
# Test double of a scheduler's status module (there is no scheduler in these tests): returns the
# member states stored in a JSON file ({node name: state} or {node name: {"state": .., "details": {..}}}),
# for the members asked about.
from __future__ import annotations

import json

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={"members": {"type": "list", "elements": "str", "required": True},
                                          "path": {"type": "path", "required": True}}, supports_check_mode=True)
    with open(module.params["path"]) as f:
        states = json.load(f)
    asked = [m for m in module.params["members"] if m in states]
    entries = {m: states[m] if isinstance(states[m], dict) else {"state": states[m]} for m in asked}
    module.exit_json(changed=False, member_states={m: e["state"] for m, e in entries.items()},
                     member_details={m: e["details"] for m, e in entries.items() if "details" in e})


if __name__ == "__main__":
    main()
