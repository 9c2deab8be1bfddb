"""Static checks of the shipped manifests (no cluster needed)."""

from pathlib import Path

from k8s.crd_manifests import CRD_DIR, load_crd_manifests

CHART_CRDS = Path(__file__).resolve().parents[2] / "charts" / "hikyo-operator" / "crds"


def test_chart_crds_are_identical_to_k8s_crds():
    """design.md: the chart ships k8s/crds/ byte for byte."""
    ours = {p.name: p.read_bytes() for p in CRD_DIR.glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in CHART_CRDS.glob("*.yaml")}
    assert ours and ours == chart


def test_crds_are_the_two_kinds_of_s1():
    kinds = {crd["spec"]["names"]["kind"]: crd for crd in load_crd_manifests()}
    assert set(kinds) == {"HikyoInstance", "HikyoSecret"}
    assert kinds["HikyoInstance"]["spec"]["scope"] == "Cluster"
    assert kinds["HikyoSecret"]["spec"]["scope"] == "Namespaced"
    assert kinds["HikyoInstance"]["spec"]["names"]["shortNames"] == ["hkinst"]
    assert kinds["HikyoSecret"]["spec"]["names"]["shortNames"] == ["hksec"]
    for crd in kinds.values():
        (version,) = crd["spec"]["versions"]
        assert version["subresources"] == {"status": {}}
