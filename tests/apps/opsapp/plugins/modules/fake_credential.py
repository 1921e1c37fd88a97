#!/usr/bin/python
# Test double of an app's credential module (there is no cluster in these tests whose admin configuration it
# could read): returns the secret stored in the file at `path` (the tests write a generated one), and `node`, the
# host it answered on, as its options were templated there.
from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={"path": {"type": "path", "required": True},
                                          "node": {"type": "str", "default": ""}}, supports_check_mode=True)
    try:
        with open(module.params["path"]) as f:
            secret = f.read()
    except OSError as exc:
        module.fail_json(msg=f"cannot read the credential: {exc.strerror}")
    module.exit_json(changed=False, secret=secret, node=module.params["node"])


if __name__ == "__main__":
    main()
