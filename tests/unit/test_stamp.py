"""S6.2: the stamp reproduces the independently computed vectors."""

import pytest

from workers.engine.stamp import compute_stamp, empty_content_stamp, target_key

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
