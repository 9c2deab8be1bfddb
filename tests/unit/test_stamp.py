"""S6.2: the stamp reproduces the independently computed vectors."""

import pytest

from workers.engine.stamp import compute_stamp, empty_content_stamp, hkdf_sha256, target_key

ROOT = b"0123456789abcdef0123456789abcdef"
KEY = target_key(ROOT, "inst-uid", "cr-uid", "app-secret")


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        pytest.param(
            {"API_KEY": b"s3cr3t", "DB_URL": b"postgres://x"},
            "v1:8bd23b33d75c3d0dec60ba14711dc242",
            id="vector-1",
        ),
        pytest.param(
            {"DB_URL": b"postgres://x", "API_KEY": b"s3cr3t"},
            "v1:8bd23b33d75c3d0dec60ba14711dc242",
            id="vector-1-other-order",
        ),
        pytest.param(
            {"API_KEY": b"s3cr3u", "DB_URL": b"postgres://x"},
            "v1:53778fa33fef4a8775459cfb611b40eb",
            id="vector-2",
        ),
        pytest.param({}, "v1:67d60c678555f1b82e01dacc3fff4efd", id="empty"),
    ],
)
def test_s6_2_vectors(pairs, expected):
    assert compute_stamp(KEY, pairs) == expected


def test_empty_content_stamp_is_the_empty_vector():
    assert empty_content_stamp(KEY) == "v1:67d60c678555f1b82e01dacc3fff4efd"


@pytest.mark.parametrize(
    "other_key",
    [
        pytest.param(target_key(ROOT, "inst-uid-2", "cr-uid", "app-secret"), id="instance"),
        pytest.param(target_key(ROOT, "inst-uid", "cr-uid-2", "app-secret"), id="cr"),
        pytest.param(target_key(ROOT, "inst-uid", "cr-uid", "other"), id="target"),
        pytest.param(target_key(b"x" * 32, "inst-uid", "cr-uid", "app-secret"), id="root"),
    ],
)
def test_key_depends_on_every_input(other_key):
    pairs = {"API_KEY": b"s3cr3t"}
    assert compute_stamp(other_key, pairs) != compute_stamp(KEY, pairs)


def test_length_prefix_keeps_pairs_apart():
    """lp() framing: moving bytes between key and value changes the stamp."""
    assert compute_stamp(KEY, {"AB": b"C"}) != compute_stamp(KEY, {"A": b"BC"})


def test_long_values_use_multibyte_varints():
    assert compute_stamp(KEY, {"K": b"x" * 300}) != compute_stamp(KEY, {"K": b"x" * 301})


def test_root_of_wrong_length_is_refused():
    with pytest.raises(ValueError, match="32 bytes"):
        target_key(b"short", "i", "c", "t")


def test_hkdf_is_rfc_5869_test_case_3():
    """SHA-256, no salt, no info (RFC 5869 appendix A.3)."""
    okm = hkdf_sha256(bytes.fromhex("0b" * 22), b"", 42)
    assert okm.hex() == (
        "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
    )


@pytest.mark.parametrize("length", [1, 31, 32, 33, 64, 255 * 32])
def test_hkdf_matches_the_cryptography_package(length):
    """The stdlib derivation gives cryptography's HKDF bytes (the one the stamp used before)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    info = b"hikyo/k8s-stamp/v1|inst-uid|cr-uid|app-secret"
    expected = HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(ROOT)
    assert hkdf_sha256(ROOT, info, length) == expected


@pytest.mark.parametrize("length", [0, 255 * 32 + 1])
def test_hkdf_refuses_lengths_outside_rfc_5869(length):
    with pytest.raises(ValueError, match="cannot derive"):
        hkdf_sha256(ROOT, b"", length)
