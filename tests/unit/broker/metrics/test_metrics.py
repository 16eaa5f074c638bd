"""broker/metrics/__init__.py: error codes found in responses, histogram buckets."""

from __future__ import annotations

from broker.metrics import Histogram, error_codes


def test_error_codes_top_level_and_nested():
    response = {
        "error_code": 0,
        "topics": [
            {"name": "a", "error_code": 0,
             "partitions": [{"index": 0, "error_code": 6}, {"index": 1, "error_code": 0}]},
            {"name": "b", "error_code": 3, "partitions": []},
        ],
        "brokers": [{"node_id": 0, "host": "h"}],
    }
    assert sorted(error_codes(response)) == [3, 6]
    assert error_codes({"error_code": 47}) == [47]
    assert error_codes(b"encoded") == [] and error_codes([{"error_code": 1}]) == []


def test_histogram_buckets_are_upper_bounds():
    histogram = Histogram((0.001, 0.01))
    for value in (0.0005, 0.001, 0.005, 0.5):
        histogram.observe(value)
    assert histogram.counts == [2, 1, 1]  # le=0.001 includes 0.001; the last is +Inf
    assert abs(histogram.sum - 0.5065) < 1e-9
