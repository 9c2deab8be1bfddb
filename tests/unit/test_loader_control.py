"""S4.6.1: the protected loader-control set."""

import pytest

from workers.engine.loader_control import is_protected


@pytest.mark.parametrize(
    ("key", "protected"),
    [
        pytest.param("PATH", True, id="baseline-exact"),
        pytest.param("NODE_EXTRA_CA_CERTS", True, id="baseline-ca"),
        pytest.param("_JAVA_OPTIONS", True, id="leading-underscore"),
        pytest.param("LD_PRELOAD", True, id="ld-prefix"),
        pytest.param("GIT_SSH", True, id="git-prefix"),
        pytest.param("LD_", True, id="bare-prefix"),
        pytest.param("LDAP_URL", False, id="ld-without-underscore"),
        pytest.param("GITHUB_TOKEN", False, id="git-without-underscore"),
        pytest.param("PATHS", False, id="baseline-name-extended"),
        pytest.param("path", False, id="case-sensitive"),
        pytest.param("DATABASE_URL", False, id="ordinary"),
    ],
)
def test_protected_set(key, protected):
    assert is_protected(key) is protected
