# -*- coding: utf-8 -*-
# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""slurmdbd's accounts, users and associations through sacctmgr (Slurm 22.05): what sacctmgr stores as given,
and its parsable rows. Shared by the slurm_account and slurm_accounts modules."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpuaas.apps.plugins.module_utils.slurm import parse_parsable

# sacctmgr show assoc columns, in format= order, and the names the modules use for them.
ASSOC_COLUMNS = ("Cluster", "Account", "User", "ParentName", "Share", "GrpTRES", "MaxJobs", "MaxSubmit",
                 "QOS", "DefaultQOS")
ASSOC_KEYS = ("cluster", "account", "user", "parent", "fairshare", "grp_tres", "max_jobs", "max_submit_jobs",
              "qos", "default_qos")
ACCOUNT_COLUMNS = ("Account", "Description", "Organization")
USER_COLUMNS = ("User", "DefaultAccount")

_NAME_RE = re.compile(r"^[a-z0-9_][a-z0-9_.-]*$")
_TEXT_RE = re.compile(r"^[a-z0-9 _.,:;/()+@#&=-]*$")


def name_problem(kind, value):
    """Why sacctmgr would not store the name ``value`` as given (None when it would): it silently lowercases
    names, splits them at commas and cuts them at '='."""
    if not value:
        return "%s must not be empty" % kind
    if _NAME_RE.match(value):
        return None
    if value.lower() != value and _NAME_RE.match(value.lower()):
        return ("%s '%s' has uppercase letters; sacctmgr would silently store it as '%s'. Use the lowercase "
                "name." % (kind, value, value.lower()))
    bad = sorted(set(c for c in value.lower() if not re.match(r"[a-z0-9_.-]", c)))
    if not bad:
        return "%s '%s' must start with a lowercase letter, digit or '_'" % (kind, value)
    return ("%s '%s' contains characters sacctmgr cannot store as given (%s); use lowercase letters, digits, "
            "'_', '.' and '-'" % (kind, value, " ".join(repr(c) for c in bad)))


def text_problem(kind, value):
    """Why sacctmgr would not store the text (description, organization) ``value`` as given (None when it
    would): it lowercases it, turns quotes into backticks, and a '|' breaks its parsable output."""
    if value != value.strip():
        return "%s '%s' has leading or trailing spaces, which sacctmgr drops" % (kind, value)
    if value.lower() != value:
        return ("%s '%s' has uppercase letters; sacctmgr would silently store it as '%s'. Use lowercase."
                % (kind, value, value.lower()))
    if not _TEXT_RE.match(value):
        bad = sorted(set(c for c in value if not _TEXT_RE.match(c)))
        return ("%s '%s' contains characters sacctmgr does not store as given or that break its parsable "
                "output (%s)" % (kind, value, " ".join(repr(c) for c in bad)))
    return None


def assoc_rows(rows):
    """Rows of `sacctmgr -P -n show assoc format=<ASSOC_COLUMNS>` -> dicts keyed by ASSOC_KEYS."""
    return [dict((key, row[col]) for key, col in zip(ASSOC_KEYS, ASSOC_COLUMNS)) for row in rows]  # noqa: B905


def show(runner, entity, condition, columns):
    """`sacctmgr -P -n show <entity> <condition...> format=<columns>` as dicts keyed by ``columns``."""
    args = ["-P", "-n", "show", entity] + list(condition) + ["format=%s" % ",".join(columns)]
    return parse_parsable(runner.run("sacctmgr", args)[1], columns)


def show_assocs(runner, cluster=None):
    """Every association (of ``cluster`` when given), as assoc_rows() gives them."""
    return assoc_rows(show(runner, "assoc", ["where", "cluster=%s" % cluster] if cluster else [], ASSOC_COLUMNS))
