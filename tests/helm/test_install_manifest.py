"""manifests/install.yaml is the chart's current default render."""

from render_install import INSTALL, render


def test_committed_install_matches_the_chart():
    assert INSTALL.read_text() == render(), (
        "manifests/install.yaml is out of date: run scripts/render-install.sh"
    )
