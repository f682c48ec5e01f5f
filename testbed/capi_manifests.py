#!/usr/bin/env python3
"""A Cluster API provider's own manifests, made ready for a control plane on 127.0.0.1.

Reads the `config/` tree of a provider's Go module (cluster-api's core, or the in-cluster IPAM
provider's: the same files their kustomize builds use) and prints one YAML stream:

- the CRDs, with the conversion webhook that the module's `crd/patches` enable, pointed at
  the provider's manager on https://127.0.0.1:<port>/convert behind the given CA bundle;
- the mutating and validating webhook configurations, pointed the same way instead of at the
  in-cluster Service;
- the manager's ClusterRoles, bound to the user the manager authenticates as.

Webhook configurations and ClusterRoles get PREFIX before their names (as the kustomization's
namePrefix does), since every provider calls its own `manager-role` and
`validating-webhook-configuration`.

Usage: capi_manifests.py CONFIG_DIR WEBHOOK_PORT CA_FILE USER PREFIX {crds|rbac|webhooks}
"""

import base64
import pathlib
import sys

import yaml


def load_all(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def url_config(client_config, port, ca_bundle):
    """Replace a Service clientConfig by a loopback URL with the same path."""
    path = client_config.get("service", {}).get("path", "/")
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}


def crds(config, port, ca_bundle):
    kustomization = yaml.safe_load((config / "crd" / "kustomization.yaml").read_text())
    converted = {}
    for patch in kustomization.get("patches", []):
        doc = yaml.safe_load((config / "crd" / patch["path"]).read_text())
        if doc.get("spec", {}).get("conversion", {}).get("strategy") == "Webhook":
            converted[doc["metadata"]["name"]] = doc["spec"]["conversion"]
    out = []
    for resource in kustomization["resources"]:
        for crd in load_all(config / "crd" / resource):
            conversion = converted.get(crd["metadata"]["name"])
            if conversion:
                webhook = dict(conversion["webhook"])
                webhook["clientConfig"] = url_config(webhook["clientConfig"], port, ca_bundle)
                crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": webhook}
            out.append(crd)
    return out


def webhooks(config, port, ca_bundle, prefix):
    out = []
    for doc in load_all(config / "webhook" / "manifests.yaml"):
        doc["metadata"]["name"] = prefix + doc["metadata"]["name"]
        for hook in doc.get("webhooks", []):
            hook["clientConfig"] = url_config(hook["clientConfig"], port, ca_bundle)
        out.append(doc)
    return out


def rbac(config, user, prefix):
    out = []
    for name in ("role.yaml", "aggregated_role.yaml"):
        path = config / "rbac" / name
        if not path.exists():
            continue
        for role in load_all(path):
            if role.get("kind") != "ClusterRole":
                continue
            role["metadata"]["name"] = prefix + role["metadata"]["name"]
            role["metadata"].pop("namespace", None)
            out.append(role)
            out.append({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role["metadata"]["name"]},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role["metadata"]["name"],
                },
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            })
    return out


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__.strip().splitlines()[-1])
    config, port, ca_file, user, prefix, what = sys.argv[1:]
    config = pathlib.Path(config)
    ca_bundle = base64.b64encode(pathlib.Path(ca_file).read_bytes()).decode()
    docs = {
        "crds": lambda: crds(config, port, ca_bundle),
        "webhooks": lambda: webhooks(config, port, ca_bundle, prefix),
        "rbac": lambda: rbac(config, user, prefix),
    }[what]()
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
