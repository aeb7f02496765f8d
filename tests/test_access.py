"""Roles (stability/access, Note [Roles]): who may do what on a server, and the guard in every action.

The rule is checked case by case against what the issue asks (view-only beyond loopback unless operators
are named; the explicit switch wins; a student only within limits and only on their own runs); the guarded
actions against a real SQLite store: a refused action writes nothing.  The pages' source is read to check
that no page calls a writing function of the queue or the store except through stability.access."""
from __future__ import annotations

import ast
import os
import time
from pathlib import Path

import pytest

from stability import access
from stability.access import OPERATOR, STUDENT, VIEWER, Limits, Policy
from stability.config import CellConfig, ConfigError, RunConfig, TaskConfig, TrainConfig
from stability.execution import lifecycle
from stability.runs.store import RunStore
from statuses import set_status

ROOT = Path(__file__).resolve().parents[1]


def tiny(steps=20, hidden=8, seq_len=10) -> RunConfig:
    return RunConfig(CellConfig("rnn", hidden), TaskConfig("adding", {"seq_len": seq_len}), TrainConfig(steps=steps))


@pytest.mark.parametrize("address, loopback", [
    ("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("", False), (None, False), ("192.168.1.5", False), ("lab.example", False)])
def test_loopback_is_read_from_the_address_the_server_listens_on(address, loopback):
    assert access.is_loopback(address) is loopback


@pytest.mark.parametrize("address, env, identity, role", [
    ("127.0.0.1", {}, None, OPERATOR),                                        # the lecturer's own machine
    ("0.0.0.0", {}, None, VIEWER),                                            # open to the room: view-only
    ("0.0.0.0", {}, "ada@school.example", VIEWER),                            # signed in, but no operators named
    ("127.0.0.1", {"STABILITY_VIEW_ONLY": "1"}, None, VIEWER),                # the switch wins, even on loopback
    ("0.0.0.0", {"STABILITY_VIEW_ONLY": "1", "STABILITY_OPERATORS": "ada@school.example"},
     "ada@school.example", VIEWER),
    ("0.0.0.0", {"STABILITY_OPERATORS": "Ada@School.example"}, "ada@school.example", OPERATOR),
    ("0.0.0.0", {"STABILITY_OPERATORS": "ada@school.example"}, "bob@school.example", VIEWER),
    ("0.0.0.0", {"STABILITY_OPERATORS": "ada@school.example"}, None, VIEWER),
    ("0.0.0.0", {"STABILITY_OPERATORS": "ada@school.example", "STABILITY_STUDENTS": "run"},
     "bob@school.example", STUDENT),
    ("0.0.0.0", {"STABILITY_STUDENTS": "run"}, "bob@school.example", STUDENT),
    ("0.0.0.0", {"STABILITY_STUDENTS": "run"}, None, VIEWER),                 # a student must sign in
    ("0.0.0.0", {"STABILITY_VIEW_ONLY": "0"}, None, VIEWER),                  # '0' switches nothing on
    # behind an authenticating proxy on this machine: loopback says nothing, the sign-in decides
    ("127.0.0.1", {"STABILITY_OPERATORS": "ada@school.example"}, None, VIEWER),
    ("127.0.0.1", {"STABILITY_OPERATORS": "ada@school.example"}, "ada@school.example", OPERATOR),
    ("127.0.0.1", {"STABILITY_OPERATORS": "ada@school.example", "STABILITY_STUDENTS": "run"},
     "bob@school.example", STUDENT),
])
def test_each_visitor_gets_the_role_the_rule_gives(address, env, identity, role):
    visitor = Policy.from_environment(address, env).visitor(identity)
    assert visitor.role == role
    assert visitor.reason  # said in words to the visitor
    assert visitor.may_write is (role != VIEWER)
    assert visitor.may_start is (role != VIEWER)
    assert visitor.may_operate is (role == OPERATOR)


def test_a_student_changes_only_their_own_runs_and_an_operator_every_one():
    student = Policy.from_environment("0.0.0.0", {"STABILITY_STUDENTS": "run"}).visitor("bob@school.example")
    operator = Policy.from_environment("127.0.0.1", {}).visitor(None)
    viewer = Policy.from_environment("0.0.0.0", {}).visitor(None)
    assert student.may_change("bob@school.example") and not student.may_change("eve@school.example")
    assert not student.may_change(None)  # the lecturer's runs
    assert operator.may_change(None) and operator.may_change("bob@school.example")
    assert not viewer.may_change(None) and not viewer.may_change("bob@school.example")
    assert student.owner == "bob@school.example" and operator.owner is None


@pytest.mark.parametrize("env, problem", [({"STABILITY_STUDENTS": "everyone"}, "STABILITY_STUDENTS"),
                                          ({"STABILITY_STUDENT_STEPS": "many"}, "STABILITY_STUDENT_STEPS"),
                                          ({"STABILITY_STUDENT_ACTIVE_RUNS": "0"}, "STABILITY_STUDENT_ACTIVE_RUNS")])
def test_a_malformed_setting_is_one_line(env, problem):
    with pytest.raises(ConfigError, match=problem) as caught:
        Policy.from_environment("0.0.0.0", env)
    assert "\n" not in str(caught.value)


def test_limits_are_read_from_the_environment():
    limits = Limits.from_environment({"STABILITY_STUDENT_STEPS": "300", "STABILITY_STUDENT_MEMORY_BYTES": "1e6"})
    assert (limits.steps, limits.memory_bytes, limits.active_runs) == (300, 1_000_000, Limits().active_runs)


# ------------------------------------------------------------------------------ the guard in the action
@pytest.fixture
def store_path(tmp_path):
    return str(tmp_path / "runs.db")


def occupy_the_slot(store_path) -> int:
    """A run claimed by this live process: the server's one slot is held, so a started run stays queued."""
    with RunStore(store_path) as store:
        return store.create_run(tiny().to_dict(), claimed={"status": "running", "pid": os.getpid(),
                                                           "host": lifecycle.this_host(), "claim": "held"})


def test_a_viewer_starts_stops_resumes_and_deletes_nothing(store_path):
    held = occupy_the_slot(store_path)
    with RunStore(store_path) as store:
        done = store.create_run(tiny().to_dict())
        set_status(store, done, "completed")
    viewer = Policy.from_environment("0.0.0.0", {}).visitor(None)
    for attempt in (lambda: access.start_run(viewer, tiny(), store_path),
                    lambda: access.stop_run(viewer, held, store_path),
                    lambda: access.resume_run(viewer, done, store_path)):
        with pytest.raises(access.Refused, match="View only"):
            attempt()
    with RunStore(store_path) as store:
        with pytest.raises(access.Refused, match="View only"):
            access.delete_run(viewer, store, done)
        assert [(run.id, run.status, run.stop_requested) for run in store.records()[::-1]] == [
            (held, "running", False), (done, "completed", False)]


def test_a_student_starts_their_own_run_within_limits_and_touches_nobody_elses(store_path):
    occupy_the_slot(store_path)
    env = {"STABILITY_STUDENTS": "run", "STABILITY_STUDENT_ACTIVE_RUNS": "2", "STABILITY_STUDENT_STEPS": "100"}
    policy = Policy.from_environment("0.0.0.0", env)
    bob, eve = policy.visitor("bob@school.example"), policy.visitor("eve@school.example")
    first = access.start_run(bob, tiny(), store_path)
    with RunStore(store_path) as store:
        assert (store.record(first).owner, store.record(first).status) == ("bob@school.example", "queued")
    with pytest.raises(access.Refused, match="Not yours to stop"):
        access.stop_run(eve, first, store_path)
    with RunStore(store_path) as store:
        assert not store.record(first).stop_requested
    with pytest.raises(access.Refused, match="more than a student's 100"):
        access.start_run(bob, tiny(steps=101), store_path)
    access.start_run(bob, tiny(), store_path)
    with pytest.raises(access.Refused, match="2 runs queued or training"):
        access.start_run(bob, tiny(), store_path)
    access.start_run(eve, tiny(), store_path)  # the limit is each student's own
    with RunStore(store_path) as store:
        assert sorted(run.owner or "" for run in store.records()) == [
            "", "bob@school.example", "bob@school.example", "eve@school.example"]


def test_a_students_model_is_bounded_by_its_operations_memory_and_checkpoint(store_path):
    policy = Policy.from_environment("0.0.0.0", {"STABILITY_STUDENTS": "run", "STABILITY_STUDENT_STEPS": "1e9"})
    bob = policy.visitor("bob@school.example")
    with RunStore(store_path) as store:
        access.check_start(bob, tiny(), store)  # a small model passes
        with pytest.raises(access.Refused, match="operations"):
            access.check_start(bob, tiny(steps=10**8, hidden=512, seq_len=1000), store)
        with pytest.raises(access.Refused, match="checkpoint|memory"):
            access.check_start(bob, RunConfig(CellConfig("lstm", 4096), TaskConfig("adding", {"seq_len": 2}),
                                              TrainConfig(steps=1)), store)
        assert store.records() == []


def test_an_operators_start_records_no_owner(store_path):
    occupy_the_slot(store_path)
    operator = Policy.from_environment("127.0.0.1", {}).visitor(None)
    run_id = access.start_run(operator, tiny(steps=10**6), store_path)  # no student limit applies
    with RunStore(store_path) as store:
        assert store.record(run_id).owner is None


# ------------------------------------------------------------------------------ the pages' source
WRITES = {("scheduler", "start_run"), ("scheduler", "stop_run"), ("scheduler", "resume_run"), ("store", "delete_run"),
          ("sweeps", "start_sweep"), ("sweeps", "stop_sweep"), ("sweeps", "resume_sweep"),
          ("lifecycle", "mark_abandoned"), ("store", "delete_runs")}


def test_every_write_a_page_asks_for_goes_through_the_guard():
    """Each call in pages/ of a queue or store function that changes runs is preceded, in the same function,
    by a call into stability.access (Note [Guarded in the action]); start, stop, resume and delete of a run
    are only ever called as ``access.*``."""
    unguarded = []
    for path in sorted((ROOT / "pages").rglob("*.py")):
        tree = ast.parse(path.read_text())
        scopes = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.Module))]
        for scope in scopes:
            body = list(ast.walk(scope)) if isinstance(scope, ast.FunctionDef) else [
                node for statement in scope.body if not isinstance(statement, ast.FunctionDef)
                for node in ast.walk(statement)]
            calls = [node for node in body if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                     and isinstance(node.func.value, ast.Name)]
            guarded = any(call.func.value.id == "access" for call in calls)
            for call in calls:
                pair = (call.func.value.id, call.func.attr)
                if pair in WRITES and (pair[0] in ("scheduler", "store", "lifecycle") or not guarded):
                    unguarded.append(f"{path.relative_to(ROOT)}:{call.lineno} {'.'.join(pair)}")
    assert unguarded == []


def test_a_viewers_reconcile_and_warm_workers_are_skipped(store_path, monkeypatch):
    """A viewer's page writes nothing: the server's periodic reconcile marks no dead claimant interrupted."""
    from streamlit.testing.v1 import AppTest

    with RunStore(store_path) as store:
        dead = store.create_run(tiny().to_dict(), claimed={"status": "running", "pid": 2**22 + 12345,
                                                          "host": lifecycle.this_host(), "claim": "gone"})
    script = f"""
import streamlit as st
from pages.ui import store as ui_store
ui_store._reconciled.clear()
ui_store.reconcile_now_and_then({store_path!r})
st.write("done")
"""
    for view_only, expected in (("1", "running"), ("0", "interrupted")):
        monkeypatch.setenv("STABILITY_VIEW_ONLY", view_only)
        app = AppTest.from_string(script, default_timeout=60)
        app.run()
        assert not app.exception
        deadline = time.monotonic() + 30
        with RunStore(store_path) as store:
            while store.record(dead).status != expected and time.monotonic() < deadline:
                time.sleep(0.2)
            assert store.record(dead).status == expected


def test_a_failed_runs_log_path_is_shown_to_operators_only(store, monkeypatch):
    """The server's log path of a failed run is the operators' to read; a viewer gets the error alone."""
    from streamlit.testing.v1 import AppTest

    run_id = store.create_run(tiny().to_dict())
    set_status(store, run_id, "failed", error="RuntimeError: boom")
    shown = {}
    for view_only in ("0", "1"):
        monkeypatch.setenv("STABILITY_VIEW_ONLY", view_only)
        app = AppTest.from_file(str(ROOT / "pages" / "train.py"), default_timeout=60)
        app.query_params["run"] = str(run_id)
        app.run()
        assert not app.exception
        [error] = [element.value for element in app.error if "boom" in element.value]
        shown[view_only] = error
    assert "log:" in shown["0"] and "run-" in shown["0"]
    assert "log:" not in shown["1"] and str(store.home) not in shown["1"]
