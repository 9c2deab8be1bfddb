"""The wheel holds the product and no test double (issue 34): devserver/ (the reference Hikyo
server) and localcluster/ (the local control plane and its `up|down|status` command) stay in
the checkout. The files are what setuptools builds for the wheel from pyproject.toml (its
build_py step, which bdist_wheel packs), made in a temporary directory; the image installs
that wheel (tests/integration/test_operator_image.py checks the image's own file list)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = {"controlplane", "workers", "k8s", "hikyo", "templates"}
TEST_DOUBLES = {"devserver", "localcluster", "dev_cluster"}


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    out = tmp_path_factory.mktemp("wheel")
    (out / "egg").mkdir()  # egg_info's metadata goes here, not into the checkout
    built = subprocess.run(
        [
            sys.executable,
            "-c",
            "from setuptools import setup; setup()",
            "--quiet",
            "egg_info",
            "--egg-base",
            str(out / "egg"),
            "build_py",
            "--build-lib",
            str(out / "lib"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    lib = out / "lib"
    return {path.relative_to(lib).as_posix() for path in lib.rglob("*") if path.is_file()}


def test_the_wheel_holds_only_the_product_packages(wheel_files):
    assert {name.split("/")[0] for name in wheel_files} == PRODUCT


def test_no_test_double_is_in_the_wheel(wheel_files):
    doubles = [
        name
        for name in wheel_files
        if TEST_DOUBLES & {part.removesuffix(".py") for part in name.split("/")}
    ]

    assert doubles == []
    # They are in the checkout: the wheel leaves them out, they did not go missing.
    assert (REPO / "devserver/__main__.py").is_file()
    assert (REPO / "localcluster/__main__.py").is_file()


def test_every_product_module_and_data_file_is_in_the_wheel(wheel_files):
    checkout = {
        path.relative_to(REPO).as_posix()
        for package in PRODUCT
        for path in (REPO / package).rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix in {".py", ".yaml", ".html"}
    }

    assert "k8s/crds/hikyo.dev_hikyosecrets.yaml" in checkout
    assert checkout - wheel_files == set()
