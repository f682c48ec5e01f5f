"""manifests/clusterctl/ is the chart's current render, and has the shape clusterctl needs."""

import yaml

from render_clusterctl import OUT, PROVIDERS, render


def test_committed_clusterctl_files_match_the_chart():
    for name, text in render().items():
        assert (OUT / name).read_text() == text, (
            f"manifests/clusterctl/{name} is out of date: run scripts/render-install.sh"
        )


def test_each_provider_is_labelled_namespaced_and_owns_only_its_crds():
    for provider in PROVIDERS:
        objects = [o for o in yaml.safe_load_all((OUT / provider.file).read_text()) if o]
        assert objects[0] == {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": provider.namespace, "labels": {"cluster.x-k8s.io/provider": provider.label}},
        }
        for o in objects:
            assert o["metadata"]["labels"]["cluster.x-k8s.io/provider"] == provider.label, o["metadata"]
            if "namespace" in o["metadata"]:
                assert o["metadata"]["namespace"] == provider.namespace, o["metadata"]
        crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
        assert crds and all(c["spec"]["group"] in provider.groups for c in crds)
        # Every kind core refers to names the contract versions it implements; a LibvirtHost is
        # ours alone.
        for crd in (c for c in crds if c["spec"]["names"]["kind"] != "LibvirtHost"):
            labels = crd["metadata"]["labels"]
            assert {"cluster.x-k8s.io/v1beta1", "cluster.x-k8s.io/v1beta2"} <= labels.keys(), crd["metadata"]
        [deployment] = [o for o in objects if o["kind"] == "Deployment"]
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--controllers={provider.family}" in args
        image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image.startswith("${CAPLV_IMAGE_REPOSITORY:=quay.io/caplv/caplv-manager}:")


def test_hosts_move_with_their_clusters():
    objects = yaml.safe_load_all((OUT / "infrastructure-components.yaml").read_text())
    [host] = [o for o in objects if o and o["kind"] == "CustomResourceDefinition"
              and o["spec"]["names"]["kind"] == "LibvirtHost"]
    # No Cluster owns a LibvirtHost: clusterctl move takes every host (and what it owns) along.
    assert "clusterctl.cluster.x-k8s.io/move-hierarchy" in host["metadata"]["labels"]
