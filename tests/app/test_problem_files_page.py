"""The dashboard names the files its collector cannot read in full: the sidebar from `/api/health`'s counts, the
run page from the run's `failing_files`. A real collector subprocess (run as `nobody` when the tests run as
root, so that a file without read permission really cannot be read), the app under `streamlit.testing`."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.app.test_pages import APP, PAGE_FILES, PAGE_TIMEOUT_S
from tests.collector.test_daemon_support import Daemon, wait_for
from tests.collector.test_problem_files import (  # noqa: F401 (base: a fixture)
    AS_USER,
    base,
    run_detail,
    runs_with_problems,
)


def test_sidebar_and_run_page_name_a_file_that_cannot_be_read(base, monkeypatch):  # noqa: F811
    root, db, locked = runs_with_problems(base)
    monkeypatch.setenv("HOME", str(db.parent))
    monkeypatch.setenv("RUNWATCH_DB", str(db))
    monkeypatch.setenv("RUNWATCH_ROOTS", str(root))
    d = Daemon(db, [root], prefix=AS_USER)
    try:
        d.start()
        c = d.client()
        failing = wait_for(lambda: run_detail(c, "locked").get("failing_files"), "the locked file failing")
        at = AppTest.from_file(APP, default_timeout=PAGE_TIMEOUT_S)
        at.session_state["pending_run"] = "locked"
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        sidebar = [w.value for w in at.sidebar.warning]
        assert any("1 file(s) could not be read" in w for w in sidebar), sidebar
        assert any("not read" in x.value for x in at.sidebar.caption), [x.value for x in at.sidebar.caption]
        at.switch_page(PAGE_FILES["run"]).run()
        assert not at.exception, [e.value for e in at.exception]
        errors = [e.value for e in at.error]
        [shown] = [e for e in errors if str(locked) in e]
        assert failing[0]["reason"] in shown and "nothing of it was stored" in shown
    finally:
        d.ensure_stopped()
