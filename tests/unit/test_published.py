"""The estimator against published measurements, each within its stated tolerance."""

import pytest

from tests.published import TOLERANCE, compare, load

MEASUREMENTS = load()


def test_enough_published_measurements() -> None:
    assert len(MEASUREMENTS) >= 10
    assert {m["kind"] for m in MEASUREMENTS} >= {"weights", "file_size", "total", "kv_per_token"}


@pytest.mark.parametrize("m", MEASUREMENTS, ids=[m["id"] for m in MEASUREMENTS])
def test_estimate_within_tolerance(m: dict) -> None:
    c = compare(m)
    lo, hi, slack = TOLERANCE[c.kind]
    assert c.within, (f"{c.id}: estimate {c.estimate_gib:.3f} GiB vs published {c.published_gib:.3f} GiB "
                      f"(ratio {c.ratio:.3f}, allowed {lo}–{hi} + {slack} GiB)")
