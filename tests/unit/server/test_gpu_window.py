"""GPU figures over a window (loadgen.server.gpu_window), known answers from the DCGM fixture."""

from __future__ import annotations

import pytest

from loadgen.server.gpu_window import ENERGY_MJ, GpuReading, GpuSample, gpu_samples, window_gpu
from loadgen.server.replies import parse_metrics
from tests.support.dcgm import dcgm_scrapes, dcgm_values


def readings(t_open: float = 100.0, t_close: float = 130.0) -> list[GpuReading]:
    opened, closed = dcgm_scrapes()
    return [GpuReading(t_open, gpu_samples(parse_metrics(opened), 0)),
            GpuReading(t_close, gpu_samples(parse_metrics(closed), 0))]


def test_fixture_is_eight_gpus_whose_energy_counter_advances():
    opened, closed = dcgm_scrapes()
    a, b = dcgm_values(opened, ENERGY_MJ), dcgm_values(closed, ENERGY_MJ)
    assert len(a) == len(b) == 8
    assert all(y > x for x, y in zip(a, b, strict=True))


def test_the_energy_counter_is_read_under_the_parsers_total_name():
    # dcgm-exporter writes the counter without _total; prometheus_client's parser adds it
    samples = parse_metrics(dcgm_scrapes()[0])
    assert ENERGY_MJ not in samples and ENERGY_MJ + "_total" in samples
    gpus = gpu_samples(samples, 0)
    assert len(gpus) == 8 and all(s.energy_mj is not None for s in gpus.values())


def test_window_figures_known_answer():
    opened, closed = dcgm_scrapes()
    out = window_gpu(readings())
    energy_mj = sum(dcgm_values(closed, ENERGY_MJ)) - sum(dcgm_values(opened, ENERGY_MJ))
    assert out["energy_source"] == "counter"
    assert out["energy_j"] == pytest.approx(energy_mj / 1000)
    assert out["energy_j"] == pytest.approx(151_280.211)
    power = [(x + y) / 2 for x, y in zip(dcgm_values(opened, "DCGM_FI_DEV_POWER_USAGE"),
                                         dcgm_values(closed, "DCGM_FI_DEV_POWER_USAGE"), strict=True)]
    assert out["gpus"] == 8
    assert out["power_w_total"] == pytest.approx(sum(power))
    assert out["power_w_mean_per_gpu"] == pytest.approx(sum(power) / 8)
    util = dcgm_values(opened, "DCGM_FI_DEV_GPU_UTIL") + dcgm_values(closed, "DCGM_FI_DEV_GPU_UTIL")
    assert out["util_pct_mean"] == pytest.approx(sum(util) / 16)
    used = dcgm_values(opened, "DCGM_FI_DEV_FB_USED") + dcgm_values(closed, "DCGM_FI_DEV_FB_USED")
    assert out["fb_used_mib_max"] == max(used)
    assert out["window_s"] == 30.0


def test_without_the_energy_counter_energy_is_mean_power_times_window():
    rs = [GpuReading(r.t, {k: GpuSample(s.power_w, None, s.util_pct, s.fb_used_mib) for k, s in r.gpus.items()})
          for r in readings()]
    out = window_gpu(rs)
    assert out["energy_source"] == "power_x_window"
    assert out["energy_j"] == pytest.approx(out["power_w_total"] * 30.0)


def test_a_counter_that_went_down_falls_back_to_power():
    rs = readings()
    key = next(iter(rs[1].gpus))
    gpus = dict(rs[1].gpus)
    gpus[key] = GpuSample(500.0, 1.0, 90.0, 1000.0)  # the counter restarted near 0
    out = window_gpu([rs[0], GpuReading(rs[1].t, gpus)])
    assert out["energy_source"] == "power_x_window"


def test_polls_in_the_window_count_in_the_means_not_in_the_energy():
    a = GpuReading(0.0, {(0, "g"): GpuSample(100.0, 1_000_000.0, 10.0, 50.0)})
    mid = GpuReading(5.0, {(0, "g"): GpuSample(400.0, None, 70.0, 90.0)})
    b = GpuReading(10.0, {(0, "g"): GpuSample(100.0, 3_000_000.0, 10.0, 60.0)})
    out = window_gpu([a, mid, b])
    assert out["power_w_total"] == pytest.approx(200.0)
    assert out["util_pct_mean"] == pytest.approx(30.0)
    assert out["fb_used_mib_max"] == 90.0
    assert out["energy_j"] == pytest.approx(2000.0)


def test_two_exporters_are_two_nodes_and_their_gpus_add_up():
    opened, closed = dcgm_scrapes()
    rs = [GpuReading(t, {**gpu_samples(parse_metrics(text), 0), **gpu_samples(parse_metrics(text), 1)})
          for t, text in ((0.0, opened), (30.0, closed))]
    one = window_gpu(readings(0.0, 30.0))
    two = window_gpu(rs)
    assert two["gpus"] == 16
    assert two["energy_j"] == pytest.approx(2 * one["energy_j"])
    assert two["power_w_mean_per_gpu"] == pytest.approx(one["power_w_mean_per_gpu"])


def test_no_gpu_and_one_edge_give_no_figures():
    assert window_gpu([])["gpus"] == 0 and window_gpu([])["energy_j"] is None
    assert gpu_samples(parse_metrics("vllm:num_requests_running 3\n"), 0) == {}
    out = window_gpu(readings()[:1])  # the close read failed
    assert out["gpus"] == 8 and out["energy_j"] is None and out["power_w_total"] is not None


def test_a_counter_that_did_not_advance_is_stale_and_power_gives_the_energy():
    # dcgm-exporter refreshes every --collect-interval (30 s by default): a short window can see
    # the same counter at both edges, which is not 0 J
    a = GpuReading(0.0, {(0, "g"): GpuSample(300.0, 5_000_000.0, 50.0, 10.0)})
    b = GpuReading(10.0, {(0, "g"): GpuSample(300.0, 5_000_000.0, 50.0, 10.0)})
    out = window_gpu([a, b])
    assert out["energy_source"] == "power_x_window" and out["energy_j"] == pytest.approx(3000.0)
