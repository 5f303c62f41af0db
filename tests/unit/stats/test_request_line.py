"""The per-request export's line (loadgen/stats/request_line.py) and file (loadgen/run/request_export.py)."""

from __future__ import annotations

import json

import numpy as np

from loadgen.run.request_export import RequestBuffer, RequestFile
from loadgen.stats.records import RequestResult
from loadgen.stats.request_line import FIELDS, request_fields, request_line

EMPTY = np.zeros(0)


def result(**kw) -> RequestResult:
    base = dict(ok=True, error_kind=None, error_message="", prompt_tokens=100, completion_tokens=50,
                tokens_estimated=False, ttft_s=0.25, e2e_s=1.5, tpot_s=0.025, decode_tps=40.0,
                itl_token_s=EMPTY, itl_token_w=EMPTY, itl_chunk_s=EMPTY, finish_reason="length", chunks=25,
                ttfat_s=0.75, reasoning_tokens=20, reasoning_source="usage", cached_prompt_tokens=64,
                x_request_id="9f" * 16, response_id="cmpl-" + "9f" * 16)
    return RequestResult(**{**base, **kw})


def test_an_ok_request_is_one_line_with_every_field_in_order():
    fields = request_fields(result(), stage=2, phase="load", worker="w1", n=7, sent_unix_s=1_800_000_000.5,
                            input_tokens_asked=100, turn=1)
    line = json.loads(request_line("demo_c1-4", fields))
    assert tuple(line) == FIELDS
    assert line == {"run": "demo_c1-4", "stage": 2, "phase": "load", "worker": "w1", "request_id": "w1/7",
                    "x_request_id": "9f" * 16, "response_id": "cmpl-" + "9f" * 16, "sent_unix_s": 1_800_000_000.5, "ttft_s": 0.25, "ttfat_s": 0.75, "e2e_s": 1.5,
                    "input_tokens": 100, "input_tokens_asked": 100, "output_tokens": 50,
                    "output_tokens_estimated": False, "cached_tokens": 64, "reasoning_tokens": 20,
                    "reasoning_source": "usage", "chunks": 25, "ok": True, "failure_kind": None, "status": 200,
                    "finish_reason": "length", "turn": 1, "model": None, "replica": None}


def test_failures_keep_their_kind_and_status_and_null_what_they_lack():
    refused = result(ok=False, error_kind="http_5xx", error_status=503, ttft_s=None, ttfat_s=None, chunks=0,
                     completion_tokens=0, prompt_tokens=None, cached_prompt_tokens=None, finish_reason=None)
    line = json.loads(request_line(None, request_fields(refused, stage=None, phase="probe", worker="local", n=1,
                                                        sent_unix_s=1.0, input_tokens_asked=None)))
    assert (line["ok"], line["failure_kind"], line["status"], line["ttft_s"], line["input_tokens"]) == (
        False, "http_5xx", 503, None, None)
    cut = result(ok=False, error_kind="stream_error", ttft_s=0.1, chunks=3)  # failed mid-stream, after a 200
    assert request_fields(cut, stage=0, phase="load", worker="w", n=2, sent_unix_s=1.0,
                          input_tokens_asked=8)["status"] == 200
    no_answer = result(ok=False, error_kind="connect_failed", ttft_s=None, chunks=0, response_id=None)
    fields = request_fields(no_answer, stage=0, phase="load", worker="w", n=3, sent_unix_s=1.0, input_tokens_asked=8)
    assert fields["status"] is None and fields["response_id"] is None and fields["x_request_id"] == "9f" * 16


def test_the_file_appends_lines_and_a_worker_buffer_is_emptied_by_each_take(tmp_path):
    f = RequestFile(tmp_path, "run-a")
    fields = request_fields(result(), stage=0, phase="load", worker="local", n=1, sent_unix_s=2.0,
                            input_tokens_asked=100)
    f.add(fields)
    f.flush()
    buf = RequestBuffer()
    buf.add(fields)
    buf.add(fields)
    shipped = buf.take()
    assert len(shipped) == 2 and buf.take() == []
    f.close()
    f.add_many(shipped)  # a late report after the close: appended, not lost
    f.close()
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    assert len(lines) == f.lines == 3 and {json.loads(line)["run"] for line in lines} == {"run-a"}
