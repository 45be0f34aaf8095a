"""A run's checkpoint advice and its alerts' actions are built once per version of the run's stored data
(`RunService`): asked again, they come from what was built; after any change the advice reads (a new
checkpoint, new points, the run's runwatch.toml) they are what a service that never
built them answers. A real collector in-process over a real verl-shaped run folder and its real DuckDB file."""

from __future__ import annotations

import json

from collector.core.runtime import Settings
from collector.daemon.service import Collector
from collector.runs.service import RunService
from collector.store import alerts as store_alerts
from tests.collector.test_sink_actions import lines, save_checkpoint, verl_run

RUN = "spiky"


class CountingService(RunService):
    """The real service, counting how often it reads a run's inputs from the store."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reads = 0

    def inputs(self, run_id: str):
        self.reads += 1
        return super().inputs(run_id)


def answers(service: RunService) -> tuple[dict, list[dict]]:
    """The run's advice and its alerts with their actions, as the API gives them."""
    return service.advice(RUN), service.with_actions(store_alerts.list_alerts(service.store, run=RUN))


def test_the_advice_and_actions_are_built_once_and_follow_every_change(tmp_path):
    root = tmp_path / "root"
    run = verl_run(root, 360)  # checkpoints at 100, 200, 250; a grad_spike error at 300
    collector = Collector(Settings(db=tmp_path / "rw.duckdb", roots=[root]), sinks=[])
    try:
        collector.ingest_once()
        store = collector.store
        service = CountingService(store, collector.detection.thresholds)

        def same_as_fresh() -> tuple[dict, list[dict]]:
            got = answers(service)
            assert got == answers(RunService(store, collector.detection.thresholds))
            return got

        advice, alerts = same_as_fresh()
        spike = next(a for a in alerts if a["rule"] == "grad_spike")
        assert spike["severity"] == "error" and spike["action"]["restart_step"] == 200
        reads = service.reads
        assert answers(service) == (advice, alerts) and service.reads == reads  # built once, served again
        advice["recommended"] = None  # a caller changing its answer changes no one else's
        assert answers(service)[0]["recommended"] is not None

        # a checkpoint saved just before the spike (the marker still names 250): the advice lists it
        save_checkpoint(run, 290)
        (run / "latest_checkpointed_iteration.txt").write_text("250")
        collector.detection.scan_checkpoints(RUN)
        advice, alerts = same_as_fresh()
        assert 290 in [c["step"] for c in advice["checkpoints"]]

        # the run goes on and is evaluated: the advice judges by its validation loss
        with (run / "metrics.jsonl").open("a") as f:
            f.write(lines(361, 400) + "".join(json.dumps({"step": s, "data": {"val/loss": v}}) + "\n"
                                              for s, v in ((380, 1.5), (400, 1.4))))  # fmt: skip
        assert advice["metric"] == "val_loss"  # none logged yet: the default it would judge by
        collector.ingest_once()
        assert same_as_fresh()[0]["metric"] == "val/loss"

        # the run's own runwatch.toml asks for a smaller restart margin: the action goes back to step 290
        (run / "runwatch.toml").write_text("[advice]\nrestart_before_steps = 5\n")
        _, alerts = same_as_fresh()
        assert next(a for a in alerts if a["rule"] == "grad_spike")["action"]["restart_step"] == 290
    finally:
        collector.close()
