"""The one settings model (issue 11, item 2): environment over file over defaults, the API's and the
workers' views of it, and errors that name the setting in one line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from gpuaas_api import config
from gpuaas_api.config import ConfigError, GpuaasSettings, OperationSettings, Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.upper().startswith("GPUAAS_") or name.upper() == "DATABASE_URL":
            monkeypatch.delenv(name)


def test_environment_over_file_over_defaults(monkeypatch, tmp_path):
    file = tmp_path / "gpuaas.toml"
    file.write_text('pool_max = 20\nlog_level = "warning"\n[operation_timeouts]\ndeploy = 99\n')
    monkeypatch.setenv("GPUAAS_CONFIG", str(file))
    monkeypatch.setenv("GPUAAS_POOL_MAX", "30")
    monkeypatch.setenv("GPUAAS_STATE_DIR", str(tmp_path / "state"))
    s = config.load()
    assert (s.pool_max, s.log_level, s.pool_min) == (30, "WARNING", 2)
    assert s.timeouts["deploy"] == 99 and s.timeouts["refresh"] == config.DEFAULT_OPERATION_TIMEOUTS["refresh"]
    assert s.data_dir == tmp_path / "state" / "postgres"


def test_the_views_read_the_model_and_stay_dataclasses(monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_URL", "postgresql://db.example/gpuaas")
    monkeypatch.setenv("GPUAAS_TOKEN_TTL_DAYS", "7")
    monkeypatch.setenv("GPUAAS_OPERATION_TIMEOUTS", "deploy=7200, refresh=60")
    monkeypatch.setenv("GPUAAS_PULL_CREDENTIAL_REGISTRIES", "registry.example:5000, other.example")
    monkeypatch.setenv("GPUAAS_SSH_HOST_KEY_CHECKING", "false")
    api, ops = Settings(), OperationSettings(state_dir=tmp_path)
    assert (api.database_url, api.default_token_ttl_days) == ("postgresql://db.example/gpuaas", 7)
    assert ops.timeouts["deploy"] == 7200 and ops.timeouts["refresh"] == 60 and ops.state_dir == tmp_path
    assert ops.pull_credential_registries == {"registry.example:5000", "other.example"}
    assert ops.ssh_host_key_checking is False
    assert dataclasses.replace(ops, lease_seconds=5).lease_seconds == 5
    assert Settings.from_model(config.load(), pool_max=3).pool_max == 3


@pytest.mark.parametrize(("env", "message"), [
    ({"GPUAAS_POOL_MAX": "ten"}, "invalid setting GPUAAS_POOL_MAX (pool_max): Input should be a valid integer, "
                                 "unable to parse string as an integer, got 'ten'"),
    ({"GPUAAS_POOL_MIN": "5", "GPUAAS_POOL_MAX": "3"},
     "invalid setting GPUAAS_POOL_MAX (pool_max): must be at least pool_min (5), got 3"),
    ({"GPUAAS_OPERATION_TIMEOUTS": "bake=10"}, "invalid setting GPUAAS_OPERATION_TIMEOUTS (timeouts): unknown "
                                               "operation kind 'bake'"),
    ({"GPUAAS_WORKER_POLL_SECONDS": "-1"}, "invalid setting GPUAAS_WORKER_POLL_SECONDS (poll_seconds): Input "
                                           "should be greater than 0, got '-1'"),
])
def test_a_bad_value_names_its_setting(monkeypatch, env, message):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError) as caught:
        config.load()
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_secret_is_never_echoed(monkeypatch):
    monkeypatch.setenv("GPUAAS_SECRET_KEY", "not-a-fernet-key")
    with pytest.raises(ConfigError) as caught:
        config.load()
    assert "GPUAAS_SECRET_KEY" in str(caught.value) and "not-a-fernet-key" not in str(caught.value)


def test_a_bad_file_names_the_file(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUAAS_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="missing.toml: cannot read it"):
        config.load()
    (tmp_path / "typo.toml").write_text("pool_maxx = 3\n")
    monkeypatch.setenv("GPUAAS_CONFIG", str(tmp_path / "typo.toml"))
    with pytest.raises(ConfigError, match="unknown setting 'pool_maxx'"):
        config.load()


def test_the_operator_guide_lists_every_setting():
    guide = (ROOT / "docs/operator-guide.md").read_text()
    missing = [name for name in GpuaasSettings.model_fields
               if f"`{config.env_name(name)}`" not in guide or f"`{name}`" not in guide]
    assert not missing, f"docs/operator-guide.md does not describe {missing}"


def test_site_vars_from_json_a_yaml_file_or_the_config_table(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUAAS_SITE_VARS", '{"mirror_url": "http://mirror.site/{{ rke2_version }}", "mirror_tries": 3}')
    assert OperationSettings().site_vars == {"mirror_url": "http://mirror.site/{{ rke2_version }}", "mirror_tries": 3}
    (tmp_path / "site.yml").write_text("---\nproxy: http://proxy.site:3128\nno_proxy: [10.0.0.0/8]\n")
    monkeypatch.setenv("GPUAAS_SITE_VARS", str(tmp_path / "site.yml"))
    assert config.load().site_vars == {"proxy": "http://proxy.site:3128", "no_proxy": ["10.0.0.0/8"]}
    monkeypatch.delenv("GPUAAS_SITE_VARS")
    file = tmp_path / "gpuaas.toml"
    file.write_text('[site_vars]\nmirror_url = "http://mirror.site"\n')
    monkeypatch.setenv("GPUAAS_CONFIG", str(file))
    assert config.load().site_vars == {"mirror_url": "http://mirror.site"}
    monkeypatch.delenv("GPUAAS_CONFIG")
    assert config.load().site_vars == {}


@pytest.mark.parametrize(("value", "message"), [
    ('{"ansible_host": "10.0.0.1"}', "'ansible_host' starts with ansible_"),
    ('{"ansible_python_interpreter": "/usr/bin/python3"}', "'ansible_python_interpreter' starts with ansible_"),
    ('{"Mirror-URL": "x"}', "'Mirror-URL' is not a plain variable name"),
    ('{"hostvars": {}}', "'hostvars' is a name Ansible reserves"),
    ('{"mirror_url": ', "not valid JSON"),
    ('["mirror_url"]', "must be a mapping of variable names to values"),
    ("/nonexistent/site.yml", "cannot read /nonexistent/site.yml"),
])
def test_a_bad_site_var_is_refused_naming_it(monkeypatch, value, message):
    monkeypatch.setenv("GPUAAS_SITE_VARS", value)
    with pytest.raises(ConfigError) as caught:
        config.load()
    assert str(caught.value).startswith("invalid setting GPUAAS_SITE_VARS (site_vars): "), str(caught.value)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_site_vars_file_that_is_not_a_mapping_is_refused(monkeypatch, tmp_path):
    (tmp_path / "site.yml").write_text("- mirror_url\n")
    monkeypatch.setenv("GPUAAS_SITE_VARS", str(tmp_path / "site.yml"))
    with pytest.raises(ConfigError, match=r"\(site_vars\): must be a mapping of variable names to values"):
        config.load()
    (tmp_path / "site.yml").write_text("mirror_url: [\n")
    with pytest.raises(ConfigError, match="site.yml is not valid YAML"):
        config.load()
