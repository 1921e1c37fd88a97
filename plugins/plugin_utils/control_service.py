# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

"""The gpuaas control service's public API as the collection's controller-side plugins call it (the inventory
plugin gpuaas.apps.gpuaas, the vars plugin gpuaas.apps.run_secrets): the token from the environment or a file,
never from a plugin's configuration, and refusals reported with the service's code and correlation id."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.six.moves.urllib.parse import urlencode
from ansible.module_utils.urls import open_url


def read_token(who, token_file=None):
    """The API token: the content of `token_file` if one is named, else E(GPUAAS_TOKEN)."""
    if token_file:
        try:
            with open(token_file) as f:
                token = f.read().strip()
        except (IOError, OSError) as exc:
            raise AnsibleError("%s: cannot read token_file %s: %s" % (who, token_file, to_native(exc))) from None
    else:
        token = os.environ.get("GPUAAS_TOKEN", "").strip()
    if not token:
        raise AnsibleError("%s: no API token; set GPUAAS_TOKEN or token_file" % who)
    return token


class ControlService:
    """Calls to one control service with one token; `who` names the caller in error messages."""

    def __init__(self, who, url, token, validate_certs=True, timeout=30):
        self.who, self.url, self.token = who, url.rstrip("/"), token
        self.validate_certs, self.timeout = validate_certs, timeout

    def call(self, method, path, query=None):
        """The JSON answer of METHOD path?query; an AnsibleError naming the route and the service's reason."""
        url = self.url + path + ("?" + urlencode(query) if query else "")
        headers = {"Authorization": "Bearer " + self.token, "Accept": "application/json"}
        try:
            response = open_url(url, method=method, headers=headers, validate_certs=self.validate_certs,
                                timeout=self.timeout)
            return json.loads(response.read())
        except HTTPError as exc:
            raise AnsibleError("%s: %s %s answered %s: %s" % (self.who, method, path, exc.code,
                                                              self._reason(exc))) from None
        except URLError as exc:
            raise AnsibleError("%s: cannot reach %s: %s" % (self.who, url, to_native(exc.reason))) from None

    @staticmethod
    def _reason(exc):
        try:
            error = json.loads(exc.read())["error"]
            return "%s (%s; correlation id %s)" % (error["message"], error["code"], error.get("correlation_id"))
        except (ValueError, KeyError, TypeError):
            return to_native(exc.reason)
