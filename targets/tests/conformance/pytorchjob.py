"""Validates a planc pytorchjob.yaml offline against the Kubeflow and Kubernetes schemas.

Usage: python pytorchjob.py PYTORCHJOB_YAML [KUBERNETES_VERSION]
Needs the PyPI packages kubernetes-validate (the Kubernetes OpenAPI schemas as JSON schema,
strict: unknown fields are errors) and kubeflow-training (the training operator's SDK, whose
models are generated from the PyTorchJob OpenAPI schema). kubeconform, the usual tool, is a
Go binary that cannot be installed from the registries CI reaches; this checks the same two
things:
- the PyTorchJob envelope (spec, pytorchReplicaSpecs, runPolicy, ...) field by field against
  the types of the kubeflow.org/v1 models: no unknown field, every value of its declared type,
  plus the enumerations and rules the training operator's validation enforces;
- every pod template, with the job's metadata, against Kubernetes' own PodTemplate schema.
Exits 0 when every document is accepted; prints each problem with its path otherwise.
"""
import re
import sys

import yaml
import kubernetes_validate
import kubeflow.training.models as kf_models

# Enumerations of kubeflow.org/v1 (training-operator pkg/apis/kubeflow.org/v1/common_types.go),
# which the SDK models carry only as plain strings.
ENUMS = {
    "restartPolicy": {"Always", "OnFailure", "Never", "ExitCode"},
    "cleanPodPolicy": {"All", "Running", "None"},
}
# PyTorchJob replica types (training-operator's PyTorchJob validation).
REPLICA_TYPES = {"Master", "Worker"}
DEFAULT_CONTAINER = "pytorch"

problems = []


def problem(path, message):
    problems.append(f"{path}: {message}")


def check_typed(value, type_name, path, pod_templates):
    """Checks `value` against an OpenAPI type name as the SDK's openapi_types spell it."""
    if value is None:
        return
    m = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if m:
        if not isinstance(value, dict):
            return problem(path, f"expected a map, got {type(value).__name__}")
        for k, v in value.items():
            check_typed(v, m.group(1), f"{path}.{k}", pod_templates)
        return
    m = re.fullmatch(r"list\[(.+)\]", type_name)
    if m:
        if not isinstance(value, list):
            return problem(path, f"expected a list, got {type(value).__name__}")
        for i, v in enumerate(value):
            check_typed(v, m.group(1), f"{path}[{i}]", pod_templates)
        return
    scalars = {"str": str, "int": int, "bool": bool, "float": (int, float)}
    if type_name in scalars:
        ok = isinstance(value, scalars[type_name]) and not (
            type_name == "int" and isinstance(value, bool)
        )
        if not ok:
            problem(path, f"expected {type_name}, got {type(value).__name__} {value!r}")
        return
    if type_name == "V1PodTemplateSpec":
        pod_templates.append((path, value))
        return
    if type_name.startswith("V1"):
        return  # Kubernetes types outside pod templates: metadata, checked with the templates
    model = getattr(kf_models, type_name)
    if not isinstance(value, dict):
        return problem(path, f"expected an object ({type_name}), got {value!r}")
    by_json = {json: attr for attr, json in model.attribute_map.items()}
    for key, v in value.items():
        if key not in by_json:
            problem(f"{path}.{key}", f"unknown field of {type_name}")
            continue
        if key in ENUMS and v not in ENUMS[key]:
            problem(f"{path}.{key}", f"{v!r} is not one of {sorted(ENUMS[key])}")
        check_typed(v, model.openapi_types[by_json[key]], f"{path}.{key}", pod_templates)


def check_pytorchjob(doc, k8s_version):
    if doc.get("apiVersion") != "kubeflow.org/v1":
        problem("apiVersion", f"expected kubeflow.org/v1, got {doc.get('apiVersion')!r}")
    templates = []
    check_typed(doc, "KubeflowOrgV1PyTorchJob", "PyTorchJob", templates)
    specs = (doc.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    if not specs:
        problem("spec.pytorchReplicaSpecs", "missing")
    for rtype, spec in specs.items():
        where = f"spec.pytorchReplicaSpecs.{rtype}"
        if rtype not in REPLICA_TYPES:
            problem(where, f"replica type must be one of {sorted(REPLICA_TYPES)}")
        if rtype == "Master" and spec.get("replicas", 1) != 1:
            problem(f"{where}.replicas", "a PyTorchJob has exactly one Master")
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        if not any(c.get("name") == DEFAULT_CONTAINER for c in containers):
            problem(f"{where}.template", f"no container named {DEFAULT_CONTAINER!r}")
    meta = doc.get("metadata") or {}
    if not meta.get("name"):
        problem("metadata.name", "missing")
    for path, template in templates:
        wrapper = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": meta, "template": template}
        validate_kubernetes(wrapper, k8s_version, path)


def validate_kubernetes(doc, k8s_version, path):
    try:
        kubernetes_validate.validate(doc, k8s_version, strict=True)
    except kubernetes_validate.ValidationError as e:
        where = ".".join(str(p) for p in e.path)
        problem(f"{path} ({where})", e.message)


def main():
    path = sys.argv[1]
    k8s_version = sys.argv[2] if len(sys.argv) > 2 else kubernetes_validate.latest_version()
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    if not docs:
        problem(path, "no YAML document")
    for doc in docs:
        if doc.get("kind") == "PyTorchJob":
            check_pytorchjob(doc, k8s_version)
        else:
            validate_kubernetes(doc, k8s_version, doc.get("kind", "?"))
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    kinds = ", ".join(d.get("kind", "?") for d in docs)
    print(f"kubernetes {k8s_version} and kubeflow.org/v1 accept {path}: {kinds}")


if __name__ == "__main__":
    main()
