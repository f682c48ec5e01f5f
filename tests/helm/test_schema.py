"""values.schema.json: wrong value types make rendering (helm template / install) and lint fail."""

from __future__ import annotations

import helm_python as helm
import pytest

from conftest import CHART_DIR, NAMESPACE, RELEASE

WRONG = {
    "replicaCount-string": ({"replicaCount": "two"}, "/replicaCount"),
    "replicaCount-negative": ({"replicaCount": -1}, "/replicaCount"),
    "replicaCount-float": ({"replicaCount": 1.5}, "/replicaCount"),
    "caplv-enabled-string": ({"controllers": {"caplv": {"enabled": "yes"}}}, "/controllers/caplv/enabled"),
    "ignition-enabled-int": ({"controllers": {"ignition": {"enabled": 1}}}, "/controllers/ignition/enabled"),
    "fivespot-enabled-null": ({"controllers": {"fivespot": {"enabled": None}}}, "/controllers/fivespot"),
    "unknown-family": ({"controllers": {"capi": {"enabled": True}}}, "/controllers"),
    "leaderElection-string": ({"leaderElection": {"enabled": "true"}}, "/leaderElection/enabled"),
    "image-tag-number": ({"image": {"tag": 1.2}}, "/image/tag"),
    "image-repository-empty": ({"image": {"repository": ""}}, "/image/repository"),
    "pullPolicy-unknown": ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    "logFormat-unknown": ({"logFormat": "xml"}, "/logFormat"),
    "logFilter-list": ({"logFilter": ["info"]}, "/logFilter"),
    "metrics-port-string": ({"metrics": {"port": "8080"}}, "/metrics/port"),
    "metrics-port-range": ({"metrics": {"port": 70000}}, "/metrics/port"),
    "serviceMonitor-enabled-string": ({"metrics": {"serviceMonitor": {"enabled": "false"}}},
                                      "/metrics/serviceMonitor/enabled"),
    "serviceMonitor-interval": ({"metrics": {"serviceMonitor": {"interval": 30}}},
                                "/metrics/serviceMonitor/interval"),
    "networkPolicy-enabled-int": ({"networkPolicy": {"enabled": 1}}, "/networkPolicy/enabled"),
    "networkPolicy-selector-list": ({"networkPolicy": {"metricsNamespaceSelector": ["a"]}},
                                    "/networkPolicy/metricsNamespaceSelector"),
    "extraArgs-string": ({"extraArgs": "--leader-elect"}, "/extraArgs"),
    "extraArgs-number": ({"extraArgs": [1]}, "/extraArgs/0"),
    "podAnnotations-list": ({"podAnnotations": ["a"]}, "/podAnnotations"),
    "podAnnotations-bool-value": ({"podAnnotations": {"a": True}}, "/podAnnotations/a"),
    "nodeSelector-int-value": ({"nodeSelector": {"zone": 1}}, "/nodeSelector/zone"),
    "tolerations-object": ({"tolerations": {"key": "a"}}, "/tolerations"),
    "affinity-list": ({"affinity": []}, "/affinity"),
    "serviceAccount-create-string": ({"serviceAccount": {"create": "no"}}, "/serviceAccount/create"),
    "serviceAccount-name-int": ({"serviceAccount": {"name": 5}}, "/serviceAccount/name"),
    "workloadAccess-name-int": ({"workloadAccess": {"serviceAccountName": 5}},
                                "/workloadAccess/serviceAccountName"),
    "workloadAccess-name-invalid": ({"workloadAccess": {"serviceAccountName": "Not_A_Name"}},
                                    "/workloadAccess/serviceAccountName"),
    "workloadAccess-unknown-key": ({"workloadAccess": {"name": "x"}}, "/workloadAccess"),
    "resources-string": ({"resources": "small"}, "/resources"),
    "resources-limits-list": ({"resources": {"limits": ["1"]}}, "/resources/limits"),
    "typo-top-level": ({"replicas": 2}, "replicas"),
}


@pytest.mark.parametrize("values,where", WRONG.values(), ids=WRONG.keys())
def test_wrong_types_fail_rendering(chart, values, where):
    with pytest.raises(helm.HelmValuesError) as exc:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    assert where in str(exc.value)


@pytest.mark.parametrize("values,where", WRONG.values(), ids=WRONG.keys())
def test_wrong_types_fail_lint(values, where):
    report = helm.lint(CHART_DIR, values, namespace=NAMESPACE)
    assert report["errors"], report
    assert any(where in e for e in report["errors"]), report


def test_schema_is_draft_07(chart):
    assert chart.schema["$schema"] == "http://json-schema.org/draft-07/schema#"


def test_defaults_and_full_overrides_are_valid(chart):
    chart.validate_schema(None)
    chart.validate_schema(chart.values)
    chart.validate_schema({
        "controllers": {"caplv": {"enabled": True}, "ignition": {"enabled": False},
                        "fivespot": {"enabled": True}},
        "leaderElection": {"enabled": True},
        "replicaCount": 2,
        "image": {"repository": "r", "tag": "v1", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "s"}],
        "serviceAccount": {"create": False, "name": "sa", "annotations": {"a": "b"}},
        "resources": {"requests": {"cpu": 1, "memory": "1Gi"}, "limits": {"cpu": "500m"}},
        "logFormat": "text",
        "logFilter": "debug",
        "metrics": {"port": 9000, "serviceMonitor": {"enabled": True, "interval": "1m",
                                                      "scrapeTimeout": "15s",
                                                      "labels": {"release": "p"}}},
        "networkPolicy": {"enabled": True, "metricsNamespaceSelector": {
            "matchExpressions": [{"key": "k", "operator": "Exists"}]}},
        "extraArgs": ["--watch-namespace=x"],
        "podAnnotations": {"a": "b"},
        "podLabels": {"c": "d"},
        "priorityClassName": "p",
        "nodeSelector": {"k": "v"},
        "tolerations": [{"operator": "Exists"}],
        "affinity": {"nodeAffinity": {}},
    })
