"""Playback over the stream API against a real daemon: the event sequence (info, points in step order, the
alert at its step, progress to 1, complete, end of stream), timing from wall times or steps per second, and
bad values refused with a 422 that says what is wrong."""

from __future__ import annotations

import pytest

from collector.api.client import ApiError
from collector.api.playback import MAX_GAP_S, advance
from tests.collector.test_daemon_support import Daemon, wait_for

NAN_STEP = 10
T0 = 1_760_000_000.0


def write_run(folder, timed: bool, steps: int = 20) -> None:
    folder.mkdir(parents=True)
    with (folder / "metrics.jsonl").open("w") as f:
        for step in range(1, steps + 1):
            loss = "NaN" if step == NAN_STEP else f"{3.0 - step * 0.05:.3f}"
            wall = f',"wall_time":{T0 + step * 0.02:.3f}' if timed else ""
            f.write(f'{{"step":{step}{wall},"data":{{"train/loss":{loss},"train/lr":0.001}}}}\n')


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("playback")
    write_run(root / "timed", timed=True)
    write_run(root / "untimed", timed=False)
    daemon = Daemon(tmp_path_factory.mktemp("playback-db") / "rw.duckdb", [root]).start()
    client = daemon.client()
    wait_for(
        lambda: {r["id"]: r["last_step"] for r in client.get("/api/runs")} == {"timed": 20, "untimed": 20},
        "both runs stored",
    )
    wait_for(lambda: client.get("/api/alerts", params={"run": "timed", "rule": "nonfinite"}), "the NaN alert")
    yield client
    client.close()
    daemon.stop()


def play(client, run: str, **params) -> list[dict]:
    return list(client.stream(f"/api/runs/{run}/stream", params=params))  # ends after playback_complete


def test_the_events_come_in_order_with_the_alert_at_its_step(served):
    events = play(served, "timed", metric="train/loss", start_step=5, end_step=15, speed=10)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "playback_info" and kinds[-1] == "playback_complete"
    info = events[0]
    assert (info["start_step"], info["end_step"], info["steps"], info["total"]) == (5, 15, 11, 11)
    assert info["timing"] == "wall_time" and info["speed"] == 10
    points = [e for e in events if e["event"] == "point"]
    assert [p["step"] for p in points] == list(range(5, 16))
    assert all(p["metric"] == "train/loss" for p in points)
    assert points[0]["wall_time"] == pytest.approx(T0 + 5 * 0.02)
    at_step = {e["step"]: i for i, e in enumerate(events) if e["event"] == "point"}
    (alert_at,) = [i for i, k in enumerate(kinds) if k == "alert"]
    assert events[alert_at]["rule"] == "nonfinite" and events[alert_at]["first_step"] == NAN_STEP
    assert at_step[NAN_STEP] < alert_at < at_step[NAN_STEP + 1]  # after its step's points, before the next
    # as GET /api/alerts lists it, its action (what to do) included
    listed = next(
        a for a in served.get("/api/alerts", params={"run": "timed"}) if a["id"] == events[alert_at]["id"]
    )
    assert "action" in events[alert_at] and events[alert_at]["action"] == listed["action"]
    progress = [e["progress"] for e in events if e["event"] == "progress"]
    assert len(progress) == 11 and progress == sorted(progress) and progress[-1] == 1.0
    assert events[-1] == {"event": "playback_complete", "steps": 11, "total": 11, "alerts": 1}


def test_a_run_without_wall_times_plays_in_steps_per_second_and_the_whole_run_by_default(served):
    events = play(served, "untimed", start_step=0, speed=10)
    assert events[0]["timing"] == "steps_per_second"
    assert (events[0]["end_step"], events[0]["steps"], events[0]["total"]) == (20, 20, 40)
    assert [e["step"] for e in events if e["event"] == "point"] == [s for s in range(1, 21) for _ in (0, 1)]


def test_pacing_follows_wall_time_gaps_capped_or_one_second_a_step():
    clock, wall = advance(0.0, None, T0, first=True)
    assert (clock, wall) == (0.0, T0)
    clock, wall = advance(clock, wall, T0 + 2.5, first=False)
    assert clock == pytest.approx(2.5)
    clock, wall = advance(clock, wall, T0 + 86_400, first=False)  # a resume a day later
    assert clock == pytest.approx(2.5 + MAX_GAP_S)
    clock, wall = advance(clock, wall, T0, first=False)  # a clock set back: no wait
    assert clock == pytest.approx(2.5 + MAX_GAP_S)
    assert advance(3.0, None, None, first=False) == (4.0, None)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"start_step": 1, "speed": 0.05}, "speed 0.05 is outside 0.1-10"),
        ({"start_step": 1, "speed": 11}, "speed 11 is outside 0.1-10"),
        ({"start_step": 10, "end_step": 5}, "end_step 5 is before start_step 10"),
        ({"start_step": -3}, "start_step -3 is negative"),
    ],
)
def test_bad_values_are_a_422_that_says_what_is_wrong(served, params, message):
    with pytest.raises(ApiError) as err:
        play(served, "timed", **params)
    assert err.value.status == 422 and message in str(err.value) and "run 'timed'" in str(err.value)


def test_a_speed_that_is_not_a_number_and_an_unknown_run(served):
    with pytest.raises(ApiError) as err:
        play(served, "timed", start_step=1, speed="fast")
    assert err.value.status == 422 and "speed" in str(err.value)
    with pytest.raises(ApiError) as err:
        play(served, "nope", start_step=1)
    assert err.value.status == 404
