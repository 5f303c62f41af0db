"""The exporter's source on the process that owns the run: the run as it stands, at each scrape.

Reads the session (duck-typed: its runtime, fleet, guard record, capacity and stage infos) and
builds one ``exporter.ExporterSnapshot``; nothing is kept between scrapes.
"""

from __future__ import annotations

from loadgen.export.exporter import ExporterSnapshot
from loadgen.run import results


class ExporterFeed:
    """The exporter's source (``exporter.ExporterSource``): the run as it stands, at each scrape."""

    def __init__(self, session):
        self.session = session

    def exporter_snapshot(self):
        session, rt = self.session, self.session.rt
        cpu, lag = session.fleet.health_now()
        decision, capacity = session.guard_record.last, session.capacity
        info = session.stage_info.get(rt.stage) if rt.stage is not None else None
        return ExporterSnapshot(
            totals=rt.collector.totals,
            inflight=session.fleet.inflight_total(),
            users=rt.environment.runner.user_count if rt.environment.runner else 0,
            stage_index=rt.stage,
            target_concurrency=info.concurrency if info and info.rate_per_s is None else None,
            offered_rate_per_s=info.offered_rate_per_s() if info else None,
            phase=rt.kind,
            kv_projected_tokens=decision.projected_tokens if decision else None,
            kv_capacity_tokens=capacity.tokens if capacity else None,
            guard_breaches=session.guard_record.breaches,
            client_cpu_percent=cpu,
            client_loop_lag_s=lag,
            slo_attainment_target=rt.scenario.slo.attainment if rt.scenario.slo.enabled else None,
            slo_stage_attainment=results.latest_attainment(rt.collector.stages, rt.stage),
            stages=tuple(session.rows),  # finished stages' rows: final once written
            latest_slice=session.slice_book.rows[-1] if session.slice_book and session.slice_book.rows else None,
            model=rt.model_name or "",
            endpoint=rt.scenario.endpoint,
            scenario=rt.scenario.name,
        )
