"""Kubernetes manifests for a fleet: one Indexed Job per hardware configuration.

Each Job's pods run the ordinary single-machine `cxlbench run` into the store.
Nodes of a configuration are chosen by a node label (`cxlbench.io/config=NAME`
unless another key is given); one pod per node is enforced twice, by required
pod anti-affinity on the hostname and by a topology spread with a skew of 1, so
no two of a Job's pods share a machine and disturb each other's figures. A pod
that fails is not retried (backoffLimitPerIndex 0): the report says the node
failed rather than quietly measuring it twice. Huge pages and privileges are
opt-in: a pod gets neither unless asked. The user applies the file (kubectl
apply -f); cxlbench talks to no cluster.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

LABEL_KEY = "cxlbench.io/config"
FLEET_KEY = "cxlbench.io/fleet"
HUGEPAGE_SIZES = ("2Mi", "1Gi")


@dataclass
class JobSpec:
    configuration: str
    nodes: int                            # pods, one per node
    image: str
    store: str
    suite: str
    fleet_id: str
    label_key: str = LABEL_KEY
    label_value: str = ""                 # default: the configuration's name
    namespace: str = "default"
    time_limit_s: int = 3600
    hugepages: dict[str, str] = field(default_factory=dict)    # {"2Mi": "2Gi"}
    memory: str = "16Gi"                  # a triad's arrays are 4x the LLC each: 6 GiB beside a 480 MiB L3
    privileged: bool = False
    secret: str | None = None             # credentials for the store (envFrom)
    endpoint: str | None = None           # CXLBENCH_S3_ENDPOINT
    extra_args: list[str] = field(default_factory=list)


def dns_name(text: str) -> str:
    """A DNS-1123 label: lowercase alphanumerics and '-', at most 63 characters."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:63].rstrip("-") or "x"


def job(spec: JobSpec) -> dict[str, Any]:
    name = dns_name(f"cxlbench-{spec.configuration}-{spec.fleet_id}")
    labels = {"app.kubernetes.io/name": "cxlbench", FLEET_KEY: dns_name(spec.fleet_id),
              "cxlbench.io/job": name}
    one_per_node = {"matchLabels": {"cxlbench.io/job": name}}
    env = [{"name": "CXLBENCH_FLEET_ID", "value": spec.fleet_id},
           {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    if spec.endpoint:
        env.append({"name": "CXLBENCH_S3_ENDPOINT", "value": spec.endpoint})
    limits: dict[str, str] = {"memory": spec.memory}
    volumes, mounts = [], []
    for size, amount in spec.hugepages.items():
        limits[f"hugepages-{size}"] = amount
        volumes.append({"name": f"hugepages-{size.lower()}", "emptyDir": {"medium": f"HugePages-{size}"}})
        mounts.append({"name": f"hugepages-{size.lower()}", "mountPath": f"/dev/hugepages-{size.lower()}"})
    container: dict[str, Any] = {
        "name": "cxlbench", "image": spec.image,
        "command": ["cxlbench", "run", "--suite", spec.suite, "--out", spec.store,
                    "--config", spec.configuration, "--label", f"fleet-{spec.fleet_id}", "--no-report",
                    *spec.extra_args],
        "env": env,
        "resources": {"requests": dict(limits), "limits": limits},
        # Unconfined seccomp: the runtime's default profile refuses move_pages(2), with which
        # every case checks where its pages are, so every case would fail (docs/image.md)
        "securityContext": {"privileged": True} if spec.privileged else
        {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
         "seccompProfile": {"type": "Unconfined"}},
    }
    if mounts:
        container["volumeMounts"] = mounts
    if spec.secret:
        container["envFrom"] = [{"secretRef": {"name": spec.secret}}]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": {spec.label_key: spec.label_value or spec.configuration},
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": one_per_node, "topologyKey": "kubernetes.io/hostname"}]}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "DoNotSchedule", "labelSelector": one_per_node}],
        "containers": [container],
    }
    if volumes:
        pod["volumes"] = volumes
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": spec.namespace, "labels": labels},
        "spec": {"completionMode": "Indexed", "completions": spec.nodes, "parallelism": spec.nodes,
                 "backoffLimitPerIndex": 0, "maxFailedIndexes": spec.nodes,
                 "activeDeadlineSeconds": spec.time_limit_s,
                 "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def manifests(specs: list[JobSpec]) -> str:
    """The Jobs as one multi-document YAML file (each document in JSON, which is YAML)."""
    return "".join(f"---\n{json.dumps(job(s), indent=2)}\n" for s in specs)


#: A label value (and a label key's name part): at most 63 characters, alphanumerics at
#: both ends, '-', '_' and '.' between (Kubernetes, "Labels and Selectors: Syntax").
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_problems(key: str, value: str) -> list[str]:
    """What the API server would refuse in one label (the OpenAPI schema types a label
    as any string, so the schema check alone passes `a;touch x`)."""
    out = []
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        out.append(f"label value {value!r} is not valid: at most 63 characters, letters, digits, '-', '_' and "
                   "'.', starting and ending with a letter or digit")
    prefix, _, name = key.rpartition("/")
    if (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) or not name \
            or len(name) > 63 or not _LABEL_VALUE.match(name):
        out.append(f"label key {key!r} is not valid: an optional DNS subdomain and '/', then a name as a label "
                   "value is written")
    return out


def _labels_of(doc: dict[str, Any]) -> list[tuple[str, str]]:
    pod = doc.get("spec", {}).get("template", {}).get("spec", {})
    found = list((doc.get("metadata", {}).get("labels") or {}).items())
    return found + list((pod.get("nodeSelector") or {}).items())


def validate(text: str, version: str | None = None) -> list[str]:
    """Each document checked against the Kubernetes API schema, offline (the schemas
    ship inside kubernetes-validate), and its labels and node selector against the
    label syntax the schema leaves to the API server; one line per problem, none
    when valid."""
    import kubernetes_validate
    from kubernetes_validate.utils import latest_version
    version = version or latest_version()
    problems = []
    for i, doc in enumerate(d for d in text.split("---\n") if d.strip()):
        data = json.loads(doc)
        problems += [f"document {i + 1}: {p}" for k, v in _labels_of(data) for p in label_problems(k, str(v))]
        try:
            kubernetes_validate.validate(data, version, strict=True)
        except Exception as e:      # ValidationError, SchemaNotFoundError, ...
            problems.append(f"document {i + 1}: {str(e).splitlines()[0]}")
    return problems
