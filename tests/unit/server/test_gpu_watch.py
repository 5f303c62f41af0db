"""The GPU watch (loadgen.server.gpu_watch) against a fake DCGM exporter on 127.0.0.1: what it reads
at the edges, what it says when an exporter does not answer, and that a missing edge leaves the
energy unknown. The polling greenlet is not started here (start() is, with a long interval)."""

from __future__ import annotations

import itertools

import pytest

from loadgen.server.gpu_watch import GpuWatch
from tests.integration.test_gpu_metrics_e2e import closed_port_url
from tests.integration.test_guard import serve
from tests.support.dcgm import dcgm_scrapes


def watch(urls, said):
    clock = itertools.count(100.0, 5.0)  # each read takes the next 5 s: t = the middle of the reads
    return GpuWatch(urls, interval_s=3600, clock=lambda: next(clock), warn=said.append)


def test_a_stage_between_two_scrapes_has_the_fixtures_energy_and_its_window():
    opened, closed = dcgm_scrapes()
    texts = iter([opened, opened, closed])  # the start's check, the open edge, the close edge
    said: list[str] = []
    with serve({"/metrics": lambda: (200, next(texts))}) as (url, _):
        w = watch([url + "/metrics"], said).start()
        assert w is not None and said == []
        w.begin_stage(0)
        gpu = w.end_stage(0)
        w.stop()
    assert gpu["energy_source"] == "counter" and gpu["energy_j"] == pytest.approx(151_280.211)
    assert gpu["gpus"] == 8 and gpu["exporters"] == 1 and gpu["read_errors"] == 0
    assert gpu["window_s"] == pytest.approx(10.0)  # (110 + 115) / 2 - (100 + 105) / 2


def test_exporters_that_do_not_answer_or_are_not_dcgm_are_named_and_left_out():
    said: list[str] = []
    dead = closed_port_url()
    with serve({"/metrics": (200, "vllm:num_requests_running 1\n")}) as (url, _):
        w = watch([dead, url + "/metrics"], said).start()
    assert w is None  # nothing left: no GPU figures
    assert said[0].startswith(f"GPU metrics: GET {dead}: cannot connect")
    assert said[1].startswith(f"GPU metrics: GET {url}/metrics: no DCGM GPU series in it")
    assert all(line.endswith("the run goes on without its GPUs' figures") for line in said)


def test_a_failed_close_read_leaves_the_energy_unknown_and_is_counted():
    opened, _ = dcgm_scrapes()
    answers = iter([(200, opened), (200, opened), (500, "busy")])
    said: list[str] = []
    with serve({"/metrics": lambda: next(answers)}) as (url, _):
        w = watch([url + "/metrics"], said).start()
        w.begin_stage(0)
        gpu = w.end_stage(0)
        w.stop()
    assert gpu["energy_j"] is None and gpu["energy_source"] is None
    assert gpu["read_errors"] == 1 and gpu["gpus"] == 8 and gpu["power_w_total"] is not None


def test_two_nodes_are_read_together_and_their_gpus_add_up():
    opened, closed = dcgm_scrapes()
    node_a, node_b = iter([opened, opened, closed]), iter([opened, opened, closed])
    said: list[str] = []
    with serve({"/a": lambda: (200, next(node_a)), "/b": lambda: (200, next(node_b))}) as (url, _):
        w = watch([url + "/a", url + "/b"], said).start()
        w.begin_stage(0)
        gpu = w.end_stage(0)
        w.stop()
    assert said == [] and gpu["exporters"] == 2 and gpu["gpus"] == 16
    assert gpu["energy_j"] == pytest.approx(2 * 151_280.211)
