"""LogHistogram: bucket layout, quantile accuracy, bulk adds, merge, wire form, Prometheus counts."""

from __future__ import annotations

import json
import math

import msgpack
import numpy as np
import pytest

from loadgen.stats.hist import EDGES, N_BUCKETS, LogHistogram, bin_values


def test_edges_layout():
    assert len(EDGES) == 1201 and N_BUCKETS == 1202
    assert EDGES[0] == 1e-6 and EDGES[-1] == 1e6
    assert np.all(np.diff(EDGES) > 0)
    for k, decade in enumerate([1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]):
        assert EDGES[100 * k] == decade  # whole decades are exact floats
    ratio = EDGES[1:] / EDGES[:-1]
    assert np.allclose(ratio, 10**0.01)
    assert not EDGES.flags.writeable


def test_bucket_boundaries_closed_on_the_right():
    h = LogHistogram()
    h.add(1e-3)  # exactly an edge: belongs to the bucket ending at 1e-3
    h.add(0.0)  # underflow
    h.add(2e6)  # overflow
    assert h.counts[300] == 1 and h.counts[0] == 1 and h.counts[-1] == 1
    assert h.cumulative_le([1e-3 * 0.999999, 1e-3]) == [1, 2]


def test_add_and_add_many_agree_bucket_for_bucket():
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.lognormal(-4, 2, 5000), [0.0, 1e-6, 1e6, 1e7, 1e-3, 1.0]])
    one, bulk = LogHistogram(), LogHistogram()
    for v in values:
        one.add(float(v))
    bulk.add_many(values)
    assert np.array_equal(one.counts, bulk.counts)
    assert one.count == bulk.count == len(values)
    assert one.min == bulk.min == values.min() and one.max == bulk.max == values.max()
    assert math.isclose(one.sum, bulk.sum, rel_tol=1e-12)


def test_weights_equal_repeated_values():
    rng = np.random.default_rng(2)
    values = rng.lognormal(-3, 1, 300)
    weights = rng.integers(0, 5, 300)
    weighted, repeated = LogHistogram(), LogHistogram()
    weighted.add_many(values, weights)
    repeated.add_many(np.repeat(values, weights))
    assert np.array_equal(weighted.counts, repeated.counts)
    assert weighted.count == repeated.count == int(weights.sum())
    # zero-weight values do not count toward min/max
    assert weighted.min == values[weights > 0].min() and weighted.max == values[weights > 0].max()
    assert math.isclose(weighted.sum, repeated.sum, rel_tol=1e-12)


def test_add_with_weight():
    h = LogHistogram()
    h.add(0.02, 4)
    h.add(5.0, 0)
    assert h.count == 4 and h.sum == pytest.approx(0.08) and h.max == 0.02
    with pytest.raises(ValueError):
        h.add(0.1, -1)
    with pytest.raises(ValueError):
        h.add_many([0.1, 0.2], [1])


@pytest.mark.parametrize("sigma", [0.3, 1.0, 2.5])
def test_quantile_within_1_2_percent_of_numpy(sigma):
    rng = np.random.default_rng(int(sigma * 10))
    values = rng.lognormal(-3.0, sigma, 200_000)
    h = LogHistogram()
    h.add_many(values)
    for q in [0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0]:
        exact = float(np.percentile(values, q * 100))
        got = h.quantile(q)
        assert abs(got - exact) / exact <= 0.012, (q, got, exact)
    assert h.quantile(0.0) == values.min() and h.quantile(1.0) == values.max()
    assert h.mean == pytest.approx(values.mean(), rel=1e-12)


def test_quantile_small_and_clamped():
    h = LogHistogram()
    assert h.quantile(0.5) is None and h.min is None and h.mean is None
    h.add(0.0213)
    assert h.quantile(0.5) == 0.0213  # clamped to [min, max]
    h.add(0.0, 3)
    assert h.quantile(0.5) == 0.0  # underflow bucket -> min
    with pytest.raises(ValueError):
        h.quantile(1.5)


def test_merge_equals_one_histogram_of_everything():
    rng = np.random.default_rng(3)
    parts = [rng.lognormal(-2, 1.5, n) for n in (10, 1000, 0, 333)]
    merged, whole = LogHistogram(), LogHistogram()
    for p in parts:
        h = LogHistogram()
        h.add_many(p)
        merged.merge(h)
    whole.add_many(np.concatenate(parts))
    assert np.array_equal(merged.counts, whole.counts)
    assert merged == whole
    assert merged.quantile(0.9) == whole.quantile(0.9)


def test_wire_round_trip_json_and_msgpack():
    rng = np.random.default_rng(4)
    h = LogHistogram()
    h.add_many(rng.lognormal(-4, 1, 500), rng.integers(1, 4, 500))
    wire = h.to_message()
    assert len(wire["idx"]) < 200  # sparse
    assert all(type(i) is int for i in wire["idx"] + wire["cnt"])
    for back in (json.loads(json.dumps(wire)), msgpack.loads(msgpack.dumps(wire), strict_map_key=False)):
        g = LogHistogram.from_message(back)
        assert np.array_equal(g.counts, h.counts) and g.count == h.count
        assert g.min == h.min and g.max == h.max and g.sum == h.sum
    empty = LogHistogram.from_message(json.loads(json.dumps(LogHistogram().to_message())))
    assert empty.count == 0 and empty.min is None and empty == LogHistogram()


def test_cumulative_le_matches_exact_counts_on_bucket_edges():
    rng = np.random.default_rng(5)
    values = rng.lognormal(-3, 1.5, 20_000)
    h = LogHistogram()
    h.add_many(values)
    edges = [1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, math.inf]
    assert h.cumulative_le(edges) == [int((values <= e).sum()) for e in edges]


def test_cumulative_le_off_edge_is_within_one_bucket():
    rng = np.random.default_rng(6)
    values = rng.lognormal(-3, 1.5, 20_000)
    h = LogHistogram()
    h.add_many(values)
    for e, got in zip([0.005, 0.025, 0.25, 2.5], h.cumulative_le([0.005, 0.025, 0.25, 2.5]), strict=True):
        assert int((values <= e / 10**0.01).sum()) <= got <= int((values <= e).sum())
    assert h.cumulative_le([-1.0, 0.0, 1e6, math.inf]) == [0, 0, len(values), len(values)]


def test_cumulative_le_never_decreases_as_samples_arrive():
    rng = np.random.default_rng(7)
    edges = [0.001, 0.005, 0.0123, 0.1, 0.25, 1.0, math.inf]
    h, before = LogHistogram(), [0] * len(edges)
    for v in rng.lognormal(-3, 1.5, 300):
        h.add(float(v))
        now = h.cumulative_le(edges)
        assert all(a <= b for a, b in zip(before, now, strict=True))
        before = now
    assert before[-1] == 300 and type(before[0]) is int


def test_bin_values_once_adds_the_same_to_several_histograms():
    rng = np.random.default_rng(8)
    values, weights = rng.lognormal(-3, 1, 100), rng.integers(0, 3, 100)
    b = bin_values(values, weights)
    a, c, ref = LogHistogram(), LogHistogram(), LogHistogram()
    a.add_binned(b)
    c.add_binned(b)
    ref.add_many(values, weights)
    assert a == ref and c == ref and b.count == int(weights.sum())
    assert bin_values([]) is None and bin_values([0.1, 0.2], [0, 0]) is None
