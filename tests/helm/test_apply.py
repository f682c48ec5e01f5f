"""The rendered install applies to a Kubernetes API server: the chart's CRDs, then the
templates, with the real `kubectl`. By default against memkube (this repo's in-memory API
server) on 127.0.0.1; with $CAPLV_HELM_APPLY_KUBECONFIG against that server instead, which
scripts/genuine-test.sh points at a fresh genuine kube-apiserver, so its OpenAPI schemas, CEL
rules and admission judge every object."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import time

import pytest

from conftest import CHART_DIR, NAMESPACE, REPO, RELEASE, stop_process

DEADLINE_S = 30.0


def memkube_binary() -> pathlib.Path:
    """$CAPLV_MEMKUBE_BIN (set by scripts/test-helm.sh after building it), else build it."""
    env = os.environ.get("CAPLV_MEMKUBE_BIN")
    if env:
        return pathlib.Path(env)
    subprocess.run(["cargo", "build", "-p", "memkube", "--bin", "memkube"], cwd=REPO, check=True)
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=REPO, check=True,
        capture_output=True, text=True).stdout)
    return pathlib.Path(meta["target_directory"]) / "debug" / "memkube"


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory):
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is not installed (scripts/test-helm.sh installs kubernetes-client)")
    genuine = os.environ.get("CAPLV_HELM_APPLY_KUBECONFIG")
    if genuine:
        ok(kubectl(genuine, "get", "--raw", "/readyz"))
        yield pathlib.Path(genuine)
        return
    binary = memkube_binary()
    assert binary.is_file(), f"no memkube binary at {binary}"
    tmp = tmp_path_factory.mktemp("memkube")
    config = tmp / "kubeconfig"
    log = open(tmp / "memkube.log", "wb")
    proc = subprocess.Popen(
        [str(binary), "--listen", "127.0.0.1:0", "--kubeconfig-out", str(config)],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        # memkube writes the kubeconfig (atomically, by rename) once it is listening.
        while not config.exists():
            if proc.poll() is not None:
                pytest.fail(f"memkube exited with {proc.returncode}: {(tmp / 'memkube.log').read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"memkube wrote no kubeconfig within {DEADLINE_S}s")
            time.sleep(0.05)
        assert "127.0.0.1" in config.read_text()
        yield config
    finally:
        stop_process(proc, 10)
        log.close()


def kubectl(kubeconfig, *args, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "--request-timeout=20s", *args],
        input=input, capture_output=True, text=True, timeout=60,
    )


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"{result.args}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def ensure_namespace(kubeconfig, name: str):
    # `kubectl apply` (JSON), not `kubectl create namespace`: recent kubectl sends built-in
    # kinds to `create` as protobuf, which memkube does not speak.
    ok(kubectl(kubeconfig, "apply", "-f", "-",
               input=f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"))


@pytest.fixture(scope="module")
def crds(kubeconfig):
    files = sorted((CHART_DIR / "crds").glob("*.yaml"))
    assert files
    out = ok(kubectl(kubeconfig, "apply", "-f", str(CHART_DIR / "crds")))
    assert out.count("created") == len(files), out
    ok(kubectl(kubeconfig, "wait", "--for=condition=Established", "crd", "--all",
               f"--timeout={int(DEADLINE_S)}s"))
    return files


def apply_release(kubeconfig, render, tmp_path, values, name, namespace):
    rendered = render(values, name=name, namespace=namespace)
    assert rendered.of_kind("ServiceMonitor") == []
    manifest = tmp_path / f"{name}.yaml"
    manifest.write_text(rendered.yaml_stream())
    ensure_namespace(kubeconfig, namespace)
    out = ok(kubectl(kubeconfig, "apply", "-n", namespace, "-f", str(manifest)))
    for obj in rendered.objects:
        assert f"/{obj['metadata']['name']} created" in out, f"{obj['kind']} not created:\n{out}"
    return rendered, manifest


def names_by_kind(kubeconfig, kinds: str, namespace: str) -> dict[str, set[str]]:
    out = ok(kubectl(kubeconfig, "get", kinds, "-n", namespace, "-o", "json"))
    found: dict[str, set[str]] = {}
    for item in json.loads(out)["items"]:
        found.setdefault(item["kind"], set()).add(item["metadata"]["name"])
    return found


def test_default_install_applies(kubeconfig, crds, render, tmp_path):
    rendered, manifest = apply_release(kubeconfig, render, tmp_path, None, RELEASE, NAMESPACE)
    found = names_by_kind(kubeconfig, "deployment,serviceaccount,clusterrole,clusterrolebinding",
                          NAMESPACE)
    for kind in ("Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        for obj in rendered.of_kind(kind):
            assert obj["metadata"]["name"] in found.get(kind, set()), (kind, found)
    found = names_by_kind(kubeconfig, "role,rolebinding,service", NAMESPACE)
    for kind in ("Role", "RoleBinding", "Service"):
        for obj in rendered.of_kind(kind):
            assert obj["metadata"]["name"] in found.get(kind, set()), (kind, found)

    # What the server stored is what was rendered.
    for rendered_role in rendered.of_kind("ClusterRole"):
        role = json.loads(ok(kubectl(kubeconfig, "get", "clusterrole",
                                     rendered_role["metadata"]["name"], "-o", "json")))
        assert role["rules"] == rendered_role["rules"]
    deploy = json.loads(ok(kubectl(kubeconfig, "get", "deployment", "-n", NAMESPACE,
                                   rendered.one("Deployment")["metadata"]["name"], "-o", "json")))
    assert deploy["spec"]["template"]["spec"]["containers"][0]["args"] == rendered.args

    # Re-applying the same install is accepted (an upgrade with unchanged values).
    ok(kubectl(kubeconfig, "apply", "-n", NAMESPACE, "-f", str(manifest)))


def test_ha_install_with_network_policy_applies(kubeconfig, crds, render, tmp_path):
    namespace = "caplv-ha"
    values = {"replicaCount": 2, "networkPolicy": {"enabled": True, "metricsNamespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
        "controllers": {"fivespot": {"enabled": False}}}
    rendered, _ = apply_release(kubeconfig, render, tmp_path, values, "ha", namespace)
    found = names_by_kind(kubeconfig, "poddisruptionbudget,networkpolicy,deployment", namespace)
    for kind in ("PodDisruptionBudget", "NetworkPolicy", "Deployment"):
        assert rendered.one(kind)["metadata"]["name"] in found.get(kind, set()), (kind, found)
    pdb = json.loads(ok(kubectl(kubeconfig, "get", "pdb", "-n", namespace,
                                rendered.one("PodDisruptionBudget")["metadata"]["name"], "-o", "json")))
    assert pdb["spec"]["maxUnavailable"] == 1
