"""Shared fixtures of the Helm chart tests: the loaded chart, rendering helpers, the
generated RBAC rule files.

The chart is rendered and linted with helm-python-sdk (Helm's own Go renderer, offline)."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

import helm_python as helm
import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "helm" / "caplv"
RBAC_DIR = CHART_DIR / "files" / "rbac"
RELEASE = "caplv"
NAMESPACE = "caplv-system"
FAMILIES = ("caplv", "ignition", "fivespot")


def stop_process(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM, then SIGKILL if `proc` has not exited within `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def family_values(enabled: set[str] | tuple[str, ...]) -> dict[str, Any]:
    """`controllers:` values enabling exactly `enabled`."""
    return {"controllers": {f: {"enabled": f in enabled} for f in FAMILIES}}


def rbac_rules(name: str) -> list[dict[str, Any]]:
    """The PolicyRules of files/rbac/<name>.yaml."""
    rules = yaml.safe_load((RBAC_DIR / f"{name}.yaml").read_text())
    assert isinstance(rules, list) and rules, f"{name}.yaml holds no rule list"
    return rules


def rbac_comments(name: str) -> list[str]:
    """The `# reason` comment lines of files/rbac/<name>.yaml (without the header)."""
    lines = (RBAC_DIR / f"{name}.yaml").read_text().splitlines()
    return [l.strip() for l in lines if l.startswith("#") and not l.startswith("# Generated")]


class Rendered:
    """One rendering of the chart: the raw template outputs and the parsed objects."""

    def __init__(self, manifests: dict[str, str]):
        self.manifests = manifests
        self.objects: list[dict[str, Any]] = []
        for path, text in sorted(manifests.items()):
            for doc in yaml.safe_load_all(text):
                if doc is not None:
                    self.objects.append(doc)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of_kind(kind)
        assert len(found) == 1, f"expected one {kind}, got {len(found)}"
        return found[0]

    def named(self, kind: str, name: str) -> dict[str, Any]:
        found = [o for o in self.of_kind(kind) if o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name}, got {len(found)}"
        return found[0]

    def manager(self, kind: str) -> dict[str, Any]:
        """The manager's own object of `kind` (ServiceAccount, ClusterRole, ...): the one named
        after the release, the leader-election Role and RoleBinding for those kinds."""
        names = {o["metadata"]["name"] for o in self.of_kind(kind)}
        base = self.one("Deployment")["metadata"]["name"]
        want = f"{base}-leader-election" if kind in ("Role", "RoleBinding") else base
        if kind == "ServiceAccount":
            want = self.one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
        assert want in names, f"no {kind} {want} among {sorted(names)}"
        return self.named(kind, want)

    def text(self, template: str) -> str:
        return self.manifests[f"caplv/templates/{template}"]

    def yaml_stream(self) -> str:
        """Every rendered object as one multi-document YAML stream (comments kept)."""
        docs = [t for _, t in sorted(self.manifests.items()) if t.strip()]
        return "\n---\n".join(docs) + "\n"

    @property
    def container(self) -> dict[str, Any]:
        containers = self.one("Deployment")["spec"]["template"]["spec"]["containers"]
        assert len(containers) == 1
        return containers[0]

    @property
    def args(self) -> list[str]:
        return self.container["args"]


@pytest.fixture(scope="session")
def chart():
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def render(chart):
    """render(values) -> Rendered, as `helm template caplv helm/caplv -n caplv-system`."""

    def _render(values: dict[str, Any] | None = None, *, name: str = RELEASE,
                namespace: str = NAMESPACE) -> Rendered:
        return Rendered(chart.render(values, name=name, namespace=namespace))

    return _render
