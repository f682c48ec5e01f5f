"""The chart's Grafana dashboard and PrometheusRule: rendered only when asked for, every PromQL
expression parsed by Prometheus' own parser (testbed/promql, $CAPLV_PROMQL_NAMES), and every
metric they read present in the /metrics of a running sandbox manager."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest
import yaml

from conftest import CHART_DIR, REPO, stop_process

DASHBOARD = CHART_DIR / "dashboards" / "caplv.json"
RULES = CHART_DIR / "alerts" / "caplv.rules.yaml"
DEADLINE_S = 60.0
ALERTS = {
    "CaplvHostUnreachable",
    "CaplvCleanupStalled",
    "CaplvReconcileErrorsRising",
    "CaplvNoLeader",
    "CaplvScheduledMachineMissedWindow",
}


def dashboard_exprs() -> list[str]:
    def walk(panels):
        for panel in panels:
            yield from (t["expr"] for t in panel.get("targets", []))
            yield from walk(panel.get("panels", []))

    return list(walk(json.loads(DASHBOARD.read_text())["panels"]))


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def metric_names(exprs: list[str]) -> list[list[str]]:
    """The metric names each expression reads, from Prometheus' PromQL parser."""
    binary = os.environ.get("CAPLV_PROMQL_NAMES")
    if not binary:
        pytest.fail("$CAPLV_PROMQL_NAMES is not set (scripts/test-helm.sh builds testbed/promql)")
    out = subprocess.run([binary], input=json.dumps(exprs), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_nothing_is_rendered_by_default(render):
    rendered = render()
    assert not rendered.of_kind("PrometheusRule")
    assert not [c for c in rendered.of_kind("ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]


def test_the_dashboard_ships_as_a_configmap_grafana_loads(render):
    rendered = render({"dashboards": {"enabled": True, "namespace": "grafana", "labels": {"team": "spot"}}})
    config_map = rendered.named("ConfigMap", "caplv-dashboard")
    assert config_map["metadata"]["namespace"] == "grafana"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["labels"]["team"] == "spot"
    assert json.loads(config_map["data"]["caplv.json"]) == json.loads(DASHBOARD.read_text())


def test_the_rules_ship_as_a_prometheusrule_unchanged(render):
    rendered = render({"prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}}})
    rule = rendered.one("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    # Helm leaves the alerts' own {{ $labels.* }} templates to Prometheus.
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    assert "{{ $labels.host }}" in rendered.text("prometheusrule.yaml")


def test_the_rules_alert_on_each_state_that_needs_a_human():
    by_name = {r["alert"]: r for r in rules()}
    assert set(by_name) == ALERTS
    assert by_name["CaplvHostUnreachable"]["for"] == "10m"
    for rule in by_name.values():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_a_bad_expression_is_refused_naming_it():
    binary = os.environ.get("CAPLV_PROMQL_NAMES")
    if not binary:
        pytest.fail("$CAPLV_PROMQL_NAMES is not set")
    for bad in ["sum(rate(caplv_leader[5m])", '{job="caplv"}']:
        out = subprocess.run([binary], input=json.dumps([bad]), capture_output=True, text=True)
        assert out.returncode == 1 and bad in out.stderr.replace('\\"', '"'), (bad, out.stderr)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manager_binary() -> pathlib.Path:
    env = os.environ.get("CAPLV_MANAGER_BIN")
    if env:
        return pathlib.Path(env)
    pytest.fail("$CAPLV_MANAGER_BIN is not set (scripts/test-helm.sh builds caplv-manager)")


def kubectl(config: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["kubectl", "--kubeconfig", str(config), *args], capture_output=True, text=True)


def sample_names(text: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.MULTILINE)}


@pytest.fixture(scope="module")
def sandbox_metrics(tmp_path_factory):
    """/metrics of a sandbox manager running the seed with its window forced open, once the
    worker runs on its host."""
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is not installed (scripts/test-helm.sh installs kubernetes-client)")
    tmp = tmp_path_factory.mktemp("sandbox")
    config = tmp / "kubeconfig"
    port = free_port()
    log = open(tmp / "sandbox.log", "wb")
    proc = subprocess.Popen(
        [str(manager_binary()), "sandbox", "--metrics-addr", f"127.0.0.1:{port}",
         "--kubeconfig-out", str(config), "--hosts-dir", str(tmp / "hosts")],
        stdout=log, stderr=subprocess.STDOUT,
    )

    def wait(what, done):
        deadline = time.monotonic() + DEADLINE_S
        while not done():
            if proc.poll() is not None:
                pytest.fail(f"the sandbox exited with {proc.returncode}: {(tmp / 'sandbox.log').read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{what} not seen within {DEADLINE_S}s")
            time.sleep(0.2)

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            return answer.read().decode()

    try:
        wait("the sandbox's kubeconfig", config.exists)
        applied = kubectl(config, "apply", "-f", str(REPO / "examples" / "seed"))
        assert applied.returncode == 0, applied.stderr
        always = {"spec": {"schedule": {"enabled": True, "daysOfWeek": ["mon-sun"],
                                        "hoursOfDay": ["0-23"], "timezone": "UTC"}}}
        patched = kubectl(config, "patch", "scheduledmachine", "spot-worker-01", "--type", "merge",
                          "-p", json.dumps(always))
        assert patched.returncode == 0, patched.stderr
        wait("the worker's LibvirtMachine running", lambda: 'caplv_libvirt_machines{phase="Running"} 1' in scrape())
        yield scrape()
    finally:
        stop_process(proc, 30)
        log.close()


def test_every_metric_the_dashboard_and_rules_read_is_exported(sandbox_metrics):
    exprs = dashboard_exprs() + [r["expr"] for r in rules()]
    assert len(exprs) >= 20, exprs
    exported = sample_names(sandbox_metrics)
    missing = {}
    for expr, names in zip(exprs, metric_names(exprs)):
        assert names, f"{expr!r} reads no metric"
        for name in names:
            if name not in exported:
                missing.setdefault(name, expr)
    assert not missing, f"not in the manager's /metrics: {missing}\n{sorted(exported)}"


def test_the_inventory_gauges_describe_the_running_worker(sandbox_metrics):
    for line in [
        'caplv_libvirt_host_ready{host="laptop",namespace="default"} 1',
        'caplv_libvirt_host_reachable{host="laptop",namespace="default"} 1',
        'caplv_libvirt_host_vcpus{host="laptop",kind="total",namespace="default"} 16',
        'caplv_libvirt_host_memory_mib{host="laptop",kind="total",namespace="default"} 31560',
        'caplv_libvirt_machines_cleanup_stalled 0',
        'caplv_scheduled_machine_missed_windows_total 0',
    ]:
        assert line in sandbox_metrics, line
