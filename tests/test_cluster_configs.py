"""The files in ``cluster/``: the ``ray up`` config against Ray's own schema, the KubeRay manifest
against the parts of the RayCluster API it relies on, and the start script."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import ray
import yaml

CLUSTER = Path(__file__).resolve().parent.parent / "cluster"
RAY_SCHEMA = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"

_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}  # KubeRay: every value a string
_POD = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "spec": {
            "type": "object",
            "required": ["containers"],
            "properties": {
                "containers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "object", "required": ["name", "image"]},
                }
            },
        }
    },
}
RAY_CLUSTER = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayCluster"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["headGroupSpec", "workerGroupSpecs"],
            "properties": {
                "headGroupSpec": {
                    "type": "object",
                    "required": ["rayStartParams", "template"],
                    "properties": {"rayStartParams": _STRINGS, "template": _POD},
                },
                "workerGroupSpecs": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["groupName", "replicas", "minReplicas", "maxReplicas", "rayStartParams", "template"],
                        "properties": {
                            "replicas": {"type": "integer", "minimum": 0},
                            "minReplicas": {"type": "integer", "minimum": 0},
                            "maxReplicas": {"type": "integer", "minimum": 1},
                            "rayStartParams": _STRINGS,
                            "template": _POD,
                        },
                    },
                },
            },
        },
    },
}


def _documents(name: str) -> list[Any]:
    return list(yaml.safe_load_all((CLUSTER / name).read_text()))


def test_the_ray_up_config_is_valid_for_ray() -> None:
    (config,) = _documents("ray-cluster.yaml")
    jsonschema.validate(config, json.loads(RAY_SCHEMA.read_text()))
    assert config["head_node_type"] in config["available_node_types"]
    head = " ".join(config["head_start_ray_commands"])
    assert "ray start --head" in head and "oam-actors serve --runtime ray --address auto" in head
    assert any("ray start --address=$RAY_HEAD_IP" in command for command in config["worker_start_ray_commands"])
    assert any("pip install" in command and "oam-actors" in command for command in config["setup_commands"])


def test_the_kuberay_manifest_is_a_raycluster_with_the_server_exposed() -> None:
    cluster, service = _documents("kuberay-raycluster.yaml")
    jsonschema.validate(cluster, RAY_CLUSTER)
    for group in cluster["spec"]["workerGroupSpecs"]:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    head = cluster["spec"]["headGroupSpec"]["template"]
    server = next(c for c in head["spec"]["containers"] if c["name"] == "oam-actors")
    assert "oam-actors serve --runtime ray --address 127.0.0.1:6379" in " ".join(server["args"])
    assert (service["apiVersion"], service["kind"]) == ("v1", "Service")
    labels = head["metadata"]["labels"]
    assert all(labels.get(key) == value for key, value in service["spec"]["selector"].items())
    port_names = {port["name"] for port in server["ports"]}
    assert {port["targetPort"] for port in service["spec"]["ports"]} <= port_names


def test_the_start_script_parses_and_explains_itself() -> None:
    script = CLUSTER / "start.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    usage = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    assert usage.returncode == 2
    assert "start.sh local [NODES] [PORT]" in usage.stdout and "--runtime ray --address HEAD:PORT" in usage.stdout
