"""The cluster launcher configs pass Ray's own validator and keep cedar's security defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["cluster.yaml", "cluster-onprem.yaml"])
def test_config_is_valid_for_ray_up(name):
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / name).read_text())
    validate_config(prepare_config(config))


@pytest.mark.parametrize("name", ["cluster.yaml", "cluster-onprem.yaml"])
def test_token_auth_on_and_nothing_public(name):
    config = yaml.safe_load((ROOT / name).read_text())
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all("RAY_AUTH_MODE=token" in c
               for c in starts if c.strip().startswith(("ulimit", "RAY")))
    assert "--dashboard-host=127.0.0.1" in " ".join(config["head_start_ray_commands"])
    assert any("pip install" in c and "cedar" in c for c in config["setup_commands"])


def test_cloud_config_uses_internal_ips_and_node_types():
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    assert config["provider"]["use_internal_ips"] is True
    assert set(config["available_node_types"]) == {"cedar.head", "cedar.worker"}
    assert config["head_node_type"] == "cedar.head"
    for rule in config["provider"]["security_group"]["IpPermissions"]:
        assert all(r["CidrIp"].startswith("10.") for r in rule["IpRanges"])
