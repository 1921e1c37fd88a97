"""The operator's site variables (the `site_vars` setting) in real runs of the test app's playbook: they reach the
run below the catalog's vars, may template the run's variables without making a tenant's value a template, and a
site variable that takes the name of a parameter, target or secret the adapter declares refuses the operation
before any run."""

from __future__ import annotations

import dataclasses

import pytest

from .helpers import events, make_instance, wait_op

SA = "service_account"


def deploy(ops, site_vars: dict, **parameters) -> tuple[dict, object]:
    ops.settings = dataclasses.replace(ops.settings, site_vars=site_vars)
    instance, marker = make_instance(ops, "site", **parameters)
    ops.start_worker()
    op = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
    return wait_op(ops, op["id"]), marker


def test_site_vars_reach_the_run_below_the_catalog_and_template_only_themselves(ops):
    # app_version is the catalog's (it wins); step is the catalog's action var; message is the tenant's and
    # stays data even where the site's template refers to it.
    op, marker = deploy(ops, {"site_note": "{{ app_version }}|{{ step }}|{{ message }}", "app_version": "site's"},
                        message="{{ 6 * 7 }}")
    assert op["status"] == "succeeded", op
    assert (marker / "site_note").read_text() == "1.0.0|deploy|{{ 6 * 7 }}"
    run = ops.settings.state_dir / "runs" / op["id"] / "attempt-1"
    assert "{{ app_version }}" in (run / "site_vars.yml").read_text()


@pytest.mark.parametrize(("name", "declared"), [("marker_dir", "parameter"), ("munge_key", "secret"),
                                                ("test_members", "target")])
def test_a_site_var_named_like_the_adapters_own_refuses_the_run(ops, name, declared):
    op, marker = deploy(ops, {name: "x", "site_note": "fine"})
    assert op["status"] == "failed", op
    assert op["error"]["code"] == "site_vars_conflict", op["error"]
    assert name in op["error"]["message"] and op["error"]["details"]["variables"] == [name], declared
    assert not (marker / "log").exists()  # the playbook never ran
    assert "run.playbook_started" not in [e["type"] for e in events(ops, op["instance_id"])]
