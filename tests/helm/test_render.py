"""Lint and render the chart with helm-python-sdk and check what it produces."""

from __future__ import annotations

import itertools
from typing import Any

import helm_python as helm
import pytest

from conftest import (
    CHART_DIR,
    FAMILIES,
    NAMESPACE,
    RELEASE,
    family_values,
    rbac_comments,
    rbac_rules,
)

# Every non-empty set of families: all on, each one off in turn, two off.
ENABLED_SETS = [
    c for n in (3, 2, 1) for c in itertools.combinations(FAMILIES, n)
]


def set_id(enabled: tuple[str, ...]) -> str:
    return "+".join(enabled)


def walk(node: Any, path: str = ""):
    """Yield (path, key, value) for every mapping entry under node."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield path, k, v
            yield from walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{path}[{i}]")


# ---------------------------------------------------------------- lint


@pytest.mark.parametrize("enabled", ENABLED_SETS, ids=set_id)
def test_lint_is_clean(enabled):
    report = helm.lint(CHART_DIR, family_values(enabled), strict=True, namespace=NAMESPACE)
    assert report["errors"] == [], report
    # severity: 1 info, 2 warning, 3 error; only infos (e.g. "icon is recommended") allowed.
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


# No lint test for "all controllers disabled": Helm's lint mode turns `fail` into a log line
# (as `helm lint` does), so only rendering (test_all_controllers_disabled_fails_...) catches it.


# ---------------------------------------------------------------- controllers and RBAC


@pytest.mark.parametrize("enabled", ENABLED_SETS, ids=set_id)
def test_cluster_role_is_common_plus_enabled_families(render, enabled):
    r = render(family_values(enabled))
    role = r.manager("ClusterRole")
    expected = rbac_rules("common")
    for family in FAMILIES:  # the chart's fixed order
        if family in enabled:
            expected += rbac_rules(family)
    assert role["rules"] == expected
    # The rule files' "# reason" comments survive into the rendered ClusterRole.
    text = r.text("clusterrole.yaml")
    for name in ("common", *enabled):
        for comment in rbac_comments(name):
            assert comment in text, f"{name}.yaml comment {comment!r} missing"
    for family in set(FAMILIES) - set(enabled):
        for comment in rbac_comments(family):
            if not any(comment in rbac_comments(n) for n in ("common", *enabled)):
                assert comment not in text, f"disabled {family}: {comment!r} rendered"


@pytest.mark.parametrize("enabled", ENABLED_SETS, ids=set_id)
def test_controllers_arg_lists_exactly_the_enabled_families(render, enabled):
    args = render(family_values(enabled)).args
    assert args[0] == "run"
    controllers = [a for a in args if a.startswith("--controllers")]
    assert controllers == ["--controllers=" + ",".join(enabled)]


@pytest.mark.parametrize("enabled", ENABLED_SETS, ids=set_id)
def test_no_wildcard_in_any_rbac_rule(render, enabled):
    r = render(family_values(enabled))
    roles = r.of_kind("ClusterRole") + r.of_kind("Role")
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups", "resourceNames", "nonResourceURLs"):
                for item in rule.get(field, []):
                    assert "*" not in item, f"{role['kind']} {field}: {item!r}"
    # and nothing else in the RBAC templates spells a wildcard either
    for tpl in ("clusterrole.yaml", "leader-election-rbac.yaml", "workload-access.yaml"):
        if f"caplv/templates/{tpl}" not in r.manifests:
            continue
        assert "*" not in r.text(tpl)


def test_all_controllers_disabled_fails_with_clear_message(chart):
    with pytest.raises(helm.HelmRenderError, match="no controller family enabled: set at least one of controllers.caplv.enabled"):
        chart.render(family_values(()), name=RELEASE, namespace=NAMESPACE)


def test_cluster_role_binding_binds_the_service_account(render):
    r = render()
    sa = r.manager("ServiceAccount")
    assert sa["metadata"]["namespace"] == NAMESPACE
    crb = r.manager("ClusterRoleBinding")
    assert crb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": r.manager("ClusterRole")["metadata"]["name"],
    }
    assert crb["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}
    ]
    pod = r.one("Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]


def test_existing_service_account(render):
    r = render({"serviceAccount": {"create": False, "name": "preexisting"}})
    assert [o["metadata"]["name"] for o in r.of_kind("ServiceAccount")] == ["caplv-workload-access"]
    assert r.one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "preexisting"
    assert r.named("ClusterRoleBinding", "caplv")["subjects"][0]["name"] == "preexisting"
    assert r.manager("RoleBinding")["subjects"][0]["name"] == "preexisting"
    assert r.named("RoleBinding", "caplv-workload-token")["subjects"][0]["name"] == "preexisting"


# ---------------------------------------------------------------- leader election


def test_leader_election_enabled_by_default(render):
    r = render()
    role = r.manager("Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == rbac_rules("leader-election")
    for comment in rbac_comments("leader-election"):
        assert comment in r.text("leader-election-rbac.yaml")
    rb = r.manager("RoleBinding")
    assert rb["metadata"]["namespace"] == NAMESPACE
    assert rb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert rb["subjects"] == [
        {"kind": "ServiceAccount", "name": r.manager("ServiceAccount")["metadata"]["name"],
         "namespace": NAMESPACE}
    ]
    assert "--leader-elect" in r.args
    assert f"--leader-election-namespace={NAMESPACE}" in r.args
    # the Lease rules stay out of the ClusterRole
    assert not any("leases" in rule["resources"] for rule in r.manager("ClusterRole")["rules"])


def test_leader_election_disabled(render):
    r = render({"leaderElection": {"enabled": False}})
    for kind in ("Role", "RoleBinding"):
        assert [o["metadata"]["name"] for o in r.of_kind(kind)] == ["caplv-workload-token"]
    assert not any(a.startswith("--leader-elect") for a in r.args)
    # without a Lease, a rollout must not run two managers side by side
    assert r.one("Deployment")["spec"]["strategy"] == {"type": "Recreate"}


def test_several_replicas_require_leader_election(chart):
    with pytest.raises(helm.HelmRenderError, match="leaderElection.enabled is false"):
        chart.render({"replicaCount": 2, "leaderElection": {"enabled": False}},
                     name=RELEASE, namespace=NAMESPACE)


# ---------------------------------------------------------------- Deployment


def test_security_context_fits_restricted_v2(render):
    r = render()
    pod = r.one("Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    sc = r.container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert "add" not in sc["capabilities"]
    assert sc.get("privileged", False) is False
    assert pod.get("hostNetwork", False) is False
    assert pod.get("hostPID", False) is False


@pytest.mark.parametrize(
    "values",
    [
        None,
        {"replicaCount": 3, "networkPolicy": {"enabled": True},
         "metrics": {"serviceMonitor": {"enabled": True}}},
    ],
    ids=["defaults", "everything-on"],
)
def test_no_fixed_uid_or_gid_anywhere(render, values):
    for obj in render(values).objects:
        for path, key, _ in walk(obj):
            assert key not in ("runAsUser", "runAsGroup", "fsGroup"), f"{obj['kind']}{path}.{key}"


def test_probes_on_healthz_and_readyz(render):
    c = render().container
    port = c["ports"][0]
    assert port == {"name": "metrics", "containerPort": 8080, "protocol": "TCP"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "--metrics-addr=0.0.0.0:8080" in c["args"]


def test_tmp_is_an_empty_dir(render):
    r = render()
    pod = r.one("Deployment")["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in r.container["volumeMounts"]}
    assert "/tmp" in mounts
    volume = next(v for v in pod["volumes"] if v["name"] == mounts["/tmp"])
    assert "emptyDir" in volume


def test_pod_name_from_downward_api_and_grace_period(render):
    r = render()
    env = {e["name"]: e for e in r.container["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    pod = r.one("Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 30


def test_default_args_image_and_resources(render, chart):
    r = render()
    assert r.args == [
        "run",
        "--controllers=caplv,ignition,fivespot",
        "--metrics-addr=0.0.0.0:8080",
        "--log-format=json",
        "--log-filter=info",
        "--workload-service-account=caplv-workload-access",
        f"--workload-service-account-namespace={NAMESPACE}",
        "--leader-elect",
        f"--leader-election-namespace={NAMESPACE}",
    ]
    app_version = chart.metadata["appVersion"]
    assert r.container["image"] == f"quay.io/caplv/caplv-manager:{app_version}"
    assert r.container["imagePullPolicy"] == "IfNotPresent"
    res = r.container["resources"]
    assert res["requests"] == {"cpu": "50m", "memory": "64Mi"}
    assert res["limits"]["memory"] == "512Mi"
    assert r.one("Deployment")["spec"]["replicas"] == 1


def test_overrides_reach_the_pod(render):
    r = render({
        "image": {"repository": "registry.example/caplv", "tag": "v9", "pullPolicy": "Always"},
        "logFormat": "text",
        "logFilter": "info,caplv=debug",
        "metrics": {"port": 9090},
        "extraArgs": ["--watch-namespace=clusters", "--endpoint-probe-interval-seconds=30"],
        "podAnnotations": {"example.com/a": "b"},
        "podLabels": {"team": "infra"},
        "nodeSelector": {"node-role.kubernetes.io/infra": ""},
        "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        "priorityClassName": "system-cluster-critical",
        "imagePullSecrets": [{"name": "pull"}],
    })
    c = r.container
    assert c["image"] == "registry.example/caplv:v9"
    assert c["imagePullPolicy"] == "Always"
    assert "--log-format=text" in c["args"]
    assert "--log-filter=info,caplv=debug" in c["args"]
    assert "--metrics-addr=0.0.0.0:9090" in c["args"]
    assert c["args"][-2:] == ["--watch-namespace=clusters", "--endpoint-probe-interval-seconds=30"]
    assert c["ports"][0]["containerPort"] == 9090
    tpl = r.one("Deployment")["spec"]["template"]
    assert tpl["metadata"]["annotations"] == {"example.com/a": "b"}
    assert tpl["metadata"]["labels"]["team"] == "infra"
    pod = tpl["spec"]
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/infra": ""}
    assert pod["tolerations"][0]["key"] == "infra"
    assert "podAntiAffinity" in pod["affinity"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    svc = r.one("Service")
    assert svc["spec"]["ports"][0]["port"] == 9090


# ---------------------------------------------------------------- Service, PDB, monitoring, netpol


def test_metrics_service(render):
    r = render()
    svc = r.one("Service")
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod_labels = r.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()


def test_no_pdb_with_one_replica(render):
    assert render().of_kind("PodDisruptionBudget") == []
    assert render({"replicaCount": 1}).of_kind("PodDisruptionBudget") == []


@pytest.mark.parametrize("replicas", [2, 3])
def test_pdb_with_several_replicas(render, replicas):
    r = render({"replicaCount": replicas})
    pdb = r.one("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]
    pod_labels = r.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert r.one("Deployment")["spec"]["replicas"] == replicas


def test_service_monitor_only_when_enabled(render):
    assert render().of_kind("ServiceMonitor") == []
    r = render({"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}})
    sm = r.one("ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prom"
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    assert sm["spec"]["selector"]["matchLabels"].items() <= r.one("Service")["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_network_policy_only_when_enabled(render):
    assert render().of_kind("NetworkPolicy") == []
    r = render({"networkPolicy": {"enabled": True}})
    np = r.one("NetworkPolicy")
    # Ingress only: egress (API server, SSH to libvirt hosts) is never restricted.
    assert np["spec"]["policyTypes"] == ["Ingress"]
    assert "egress" not in np["spec"]
    (rule,) = np["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert "from" not in rule
    pod_labels = r.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert np["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()


def test_network_policy_namespace_selector(render):
    selector = {"matchLabels": {"kubernetes.io/metadata.name": "openshift-user-workload-monitoring"}}
    np = render({"networkPolicy": {"enabled": True, "metricsNamespaceSelector": selector}}).one(
        "NetworkPolicy")
    (rule,) = np["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": selector}]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]


# ---------------------------------------------------------------- labels and names


def test_standard_labels_on_every_object(render, chart):
    r = render({"replicaCount": 2, "networkPolicy": {"enabled": True},
                "metrics": {"serviceMonitor": {"enabled": True}}})
    kinds = {o["kind"] for o in r.objects}
    assert kinds == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                     "Deployment", "Service", "ServiceMonitor", "NetworkPolicy",
                     "PodDisruptionBudget"}
    for obj in r.objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "caplv", obj["kind"]
        assert labels["app.kubernetes.io/instance"] == RELEASE, obj["kind"]
        assert labels["app.kubernetes.io/version"] == chart.metadata["appVersion"], obj["kind"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", obj["kind"]
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["kind"]


def test_names_follow_the_release(render):
    r = render(name="prod")
    assert r.one("Deployment")["metadata"]["name"] == "prod-caplv"
    assert r.manager("ClusterRole")["metadata"]["name"] == "prod-caplv"
    assert r.named("ClusterRole", "prod-caplv-workload-access")
    assert r.named("Role", "prod-caplv-workload-token")
    assert r.one("Deployment")["metadata"]["labels"]["app.kubernetes.io/instance"] == "prod"


# ---------------------------------------------------------------- workload access (caplv)

# What Cluster API core does on the workload cluster through the <cluster>-kubeconfig Secret.
WORKLOAD_RULES = [
    {"apiGroups": [""], "resources": ["nodes"],
     "verbs": ["get", "list", "watch", "patch", "update", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["volumeattachments"], "verbs": ["list"]},
    {"nonResourceURLs": ["/"], "verbs": ["get"]},
]


@pytest.mark.parametrize("enabled", ENABLED_SETS, ids=set_id)
def test_workload_access_comes_with_the_caplv_family_only(render, enabled):
    r = render(family_values(enabled))
    names = {(o["kind"], o["metadata"]["name"]) for o in r.objects}
    workload = {("ServiceAccount", "caplv-workload-access"),
                ("ClusterRole", "caplv-workload-access"), ("ClusterRoleBinding", "caplv-workload-access"),
                ("Role", "caplv-workload-token"), ("RoleBinding", "caplv-workload-token")}
    if "caplv" in enabled:
        assert workload <= names
        assert "--workload-service-account=caplv-workload-access" in r.args
    else:
        assert not workload & names
        assert not any(a.startswith("--workload-service-account") for a in r.args)


def test_the_workload_service_account_gets_what_cluster_api_core_uses(render):
    r = render()
    sa = r.named("ServiceAccount", "caplv-workload-access")
    assert sa["metadata"]["namespace"] == NAMESPACE
    role = r.named("ClusterRole", "caplv-workload-access")
    assert role["rules"] == WORKLOAD_RULES
    text = r.text("workload-access.yaml")
    for reason in ("providerID", "drain", "PodDisruptionBudgets", "health probe is GET /"):
        assert reason in text, f"reason {reason!r} missing"
    crb = r.named("ClusterRoleBinding", "caplv-workload-access")
    assert crb["roleRef"]["name"] == "caplv-workload-access"
    assert crb["subjects"] == [
        {"kind": "ServiceAccount", "name": "caplv-workload-access", "namespace": NAMESPACE}
    ]
    # The manager may mint tokens for that ServiceAccount, in the release namespace, only.
    token = r.named("Role", "caplv-workload-token")
    assert token["metadata"]["namespace"] == NAMESPACE
    assert token["rules"] == rbac_rules("workload-access")
    assert token["rules"][0]["resourceNames"] == ["caplv-workload-access"]
    for comment in rbac_comments("workload-access"):
        assert comment in text
    rb = r.named("RoleBinding", "caplv-workload-token")
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": "caplv-workload-token"}
    assert rb["subjects"][0]["name"] == r.manager("ServiceAccount")["metadata"]["name"]
    assert f"--workload-service-account-namespace={NAMESPACE}" in r.args
    # and never a token of any other ServiceAccount, nor Secrets beyond what the families need
    for rule in r.manager("ClusterRole")["rules"]:
        assert "serviceaccounts/token" not in rule["resources"]


def test_a_custom_workload_service_account_name_reaches_every_place(render):
    r = render({"workloadAccess": {"serviceAccountName": "capi-reader"}})
    assert r.named("ServiceAccount", "capi-reader")
    assert r.named("ClusterRoleBinding", "caplv-workload-access")["subjects"][0]["name"] == "capi-reader"
    assert r.named("Role", "caplv-workload-token")["rules"][0]["resourceNames"] == ["capi-reader"]
    assert "--workload-service-account=capi-reader" in r.args


def test_the_workload_service_account_must_not_be_the_managers(chart):
    with pytest.raises(helm.HelmRenderError, match="workloadAccess.serviceAccountName is \"caplv\""):
        chart.render({"workloadAccess": {"serviceAccountName": "caplv"}}, name=RELEASE, namespace=NAMESPACE)
