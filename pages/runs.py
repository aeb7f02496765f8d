"""Runs: every stored run with its status, config and final metrics; open, stop, resume, delete, export.

scheduler.reconcile (dead workers -> interrupted) -> run table (select rows) -> actions on the selection.
While a run is queued or training the table refreshes itself in place.  A sweep's run shows its sweep
(a link to the Sweep page) and its varied values (``cell=rnn lr=0.001``), as every other page tags it.
"""
import pandas as pd
import streamlit as st

from pages.ui.access import current_visitor, view_only_line
from pages.ui.classroom import classroom_style, classroom_switch
from pages.ui.live import polled
from pages.ui.router import require_router
from pages.ui.selection import final_columns, run_selection
from pages.ui.status import EXTERNAL
from pages.ui.store import open_store, reconcile_now_and_then, store_guard
from stability import access
from stability.config import ConfigError
from stability.execution import lifecycle
from stability.execution.lifecycle import RESUMABLE
from stability.runs.status import ACTIVE_STATUSES
from stability.runs.store import RunActive, RunNotFound
from stability.runs.table import run_table
from stability.training.checkpoints import ResumeError
from stability.workers import scheduler

require_router(__file__)

TABLE_COLUMNS = ["id", "name", "status", "sweep", "varied", "cell", "task", "seq_len", "progress",
                 "steps_done"]  # then finals
TAIL_COLUMNS = ["created", "error"]
REFRESH_S = 3.0


def export_csv(store, run_ids):
    """Metric rows of the runs in one read, run after run, in the columns ``python -m stability export`` writes."""
    return store.metrics_many(run_ids).to_csv(index=False).encode()


def id_list(run_ids):
    return ", ".join(f"#{run_id}" for run_id in run_ids)


def runs_table(store):
    """The run table with a 'steps_done' text column, after marking runs whose worker died."""
    reconcile_now_and_then(store.url)
    table = run_table(store)
    table["steps_done"] = [f"{step:,} / {total:,}" for step, total in
                           zip(table["step"].fillna(0).astype(int), table["total_steps"].fillna(0).astype(int))]
    return with_sweeps(table)


def with_sweeps(table):
    """``table`` with ``sweep``: a link to the run's sweep on the Sweep page (empty for a run of none);
    ``varied`` (the sweep's values of the run) comes with run_table."""
    table["sweep"] = [None if pd.isna(sweep_id) else f"sweep?sweep={int(sweep_id)}" for sweep_id in table["sweep_id"]]
    return table


def ask_to_delete(run_ids):
    st.session_state["runs_pending_delete"] = list(run_ids)


def delete_runs(store, run_ids):
    """Delete the runs (callback of the confirm button, so the table redraws without them), each through the
    visitor's guard (stability.access)."""
    visitor, refused, kept = current_visitor(), [], []
    for run_id in run_ids:
        try:
            access.delete_run(visitor, store, run_id)
        except RunNotFound:  # already deleted, e.g. from another tab
            pass
        except RunActive:  # resumed since the button was drawn: the store's delete kept it (Note [Guarded delete])
            kept.append(run_id)
        except access.Refused as error:
            refused.append(str(error))
    st.session_state.pop("runs_pending_delete", None)
    st.session_state["runs_notice"] = " ".join(refused[:1]) or deleted_notice(run_ids, kept)


def deleted_notice(run_ids, kept):
    """One line: the runs deleted, and those the store kept because they were queued or running again."""
    deleted = [run_id for run_id in run_ids if run_id not in kept]
    return "; ".join(([f"Deleted {id_list(deleted)}"] if deleted else []) + (
        [f"{id_list(kept)} not deleted: queued or running again (resumed meanwhile); stop "
         f"{'it' if len(kept) == 1 else 'them'} first"] if kept else [])) + "."


def cancel_delete():
    st.session_state.pop("runs_pending_delete", None)


def confirm_delete(store, selected):
    """The second step of Delete: names the runs, refuses those still training."""
    pending = st.session_state.get("runs_pending_delete")
    if not pending:
        return
    if pending != selected["id"].tolist():  # the selection changed since Delete was clicked
        cancel_delete()
        return
    active = selected.loc[selected["status"].isin(ACTIVE_STATUSES), "id"].tolist()
    finished = selected.loc[~selected["status"].isin(ACTIVE_STATUSES), "id"].tolist()
    with st.container(border=True):
        if active:
            st.warning(f"{id_list(active)} still training: stop {'it' if len(active) == 1 else 'them'} first.")
        if finished:
            st.warning(f"Delete {id_list(finished)} with every metric row and checkpoint? This cannot be undone.")
        buttons = st.container(horizontal=True)
        buttons.button(f"Delete {len(finished)} run{'s' if len(finished) != 1 else ''}", key="runs_delete_confirm",
                   type="primary", disabled=not finished, on_click=delete_runs, args=(store, finished))
        buttons.button("Cancel", key="runs_delete_cancel", on_click=cancel_delete)


def stop_runs(store, selected):
    active = selected.loc[selected["status"].isin(ACTIVE_STATUSES) & ~selected["external"], "id"].tolist()
    visitor, outcome = current_visitor(), {}
    with st.spinner(f"Stopping {id_list(active)}…"):
        for run_id in active:
            try:
                outcome[run_id] = access.stop_run(visitor, run_id, store.url)
            except ConfigError as error:  # not the visitor's to stop (stability.access)
                outcome[run_id] = f"not stopped: {error}"
    st.session_state["runs_notice"] = "; ".join(f"#{run_id} {status}" for run_id, status in outcome.items())


def resume_runs(store, selected):
    """Queue the selected stopped, interrupted or failed runs to continue from their checkpoints."""
    visitor, outcome = current_visitor(), []
    for run_id in selected.loc[selected["status"].isin(RESUMABLE) & ~selected["external"], "id"].tolist():
        try:
            access.resume_run(visitor, run_id, store.url)
            outcome.append(f"#{run_id} resumed")
        except (ResumeError, RunNotFound, ConfigError) as error:  # ConfigError: a stored config this version refuses
            outcome.append(f"#{run_id} not resumed: {' '.join(str(error).split())}"
                           if isinstance(error, ConfigError) else str(error))
    st.session_state["runs_notice"] = "; ".join(outcome)


def silent_external(store, selected):
    """The selected external runs that may be marked ended: no word from their loop for long (lifecycle.abandoned)."""
    candidates = selected.loc[selected["status"].isin(ACTIVE_STATUSES) & selected["external"], "id"].tolist()
    return [run_id for run_id in candidates if lifecycle.abandoned(store.record(run_id)) is None]


def mark_ended(store, run_ids):
    """Mark the silent external runs ended ('interrupted'), so they can be deleted; a run that spoke
    meanwhile is left alone (lifecycle.mark_abandoned's compare-and-set on its heartbeat)."""
    outcome, visitor = [], current_visitor()
    for run_id in run_ids:
        try:
            marked = access.mark_ended(visitor, store, run_id)
        except RunNotFound:
            continue
        except access.Refused as error:
            outcome.append(str(error))
            continue
        outcome.append(f"#{run_id} marked ended" if marked else f"#{run_id} spoke or changed meanwhile; left as it is")
    st.session_state["runs_notice"] = "; ".join(outcome) or "Nothing to mark ended."


def changeable(store, selected, visitor):
    """The selected rows the visitor may stop, resume or delete: every one for an operator, a student's own."""
    if visitor.may_operate or selected.empty:
        return selected
    owners = {run_id: store.record(run_id).owner for run_id in selected["id"].tolist()}
    return selected[[visitor.may_change(owners[run_id]) for run_id in selected["id"].tolist()]]


def actions(store, selected):
    """Open in Compare and Export CSV for everybody; Stop, Resume, Delete (with a confirm step) on the
    selected runs the visitor may change (stability.access, Note [Roles])."""
    ids = selected["id"].tolist()
    visitor = current_visitor()
    if not visitor.may_start:
        row = st.container(horizontal=True)
        if row.button("Open in Compare", key="runs_compare", icon=":material/monitoring:", disabled=not ids):
            st.switch_page("pages/compare.py", query_params={"runs": ",".join(map(str, ids))})
        export_button(row, store, ids)
        view_only_line(visitor)
        return
    selected = changeable(store, selected, visitor)
    ours = selected[~selected["external"]]  # an external run is its own loop's to stop or run again
    training = ours["status"].isin(ACTIVE_STATUSES).any()
    resumable = ours["status"].isin(RESUMABLE).any()
    if selected["external"].any():
        st.caption(f"{id_list(selected.loc[selected['external'], 'id'].tolist())}: {EXTERNAL}; "
                   "Stop and Resume are your loop's.")
    row = st.container(horizontal=True)
    if row.button("Open in Compare", key="runs_compare", icon=":material/monitoring:", disabled=not ids):
        st.switch_page("pages/compare.py", query_params={"runs": ",".join(map(str, ids))})
    if row.button("Stop", key="runs_stop", icon=":material/stop_circle:", disabled=not training,
                  help="Stop the selected runs that are queued or training."):
        stop_runs(store, selected)
        st.rerun()
    if row.button("Resume", key="runs_resume", icon=":material/play_circle:", disabled=not resumable,
                  help="Continue the selected stopped, interrupted or failed runs from their last checkpoint "
                       "(written every 5 minutes and when a run ends), appending to the same rows."):
        resume_runs(store, selected)
        st.rerun()
    mine = selected["id"].tolist()
    row.button("Delete", key="runs_delete", icon=":material/delete:", disabled=not mine,
               on_click=ask_to_delete, args=(mine,))
    silent = silent_external(store, selected)
    if silent:
        row.button("Mark ended", key="runs_mark_ended", icon=":material/flag:", on_click=mark_ended,
                   args=(store, silent), help="External runs whose loop has said nothing for "
                   f"{int(lifecycle.ABANDONED_AFTER_S // 60)} min (e.g. its process died on another machine): "
                   "mark them ended (interrupted), so they can be deleted.")
    export_button(row, store, ids)
    confirm_delete(store, selected)


def export_button(row, store, ids):
    row.download_button("Export CSV", lambda: export_csv(store, ids), key="runs_export",
                        file_name=f"runs-{'-'.join(map(str, ids))}.csv", mime="text/csv",
                        icon=":material/download:", disabled=not ids,
                        help="Every metric row of the selected runs: run_id, step, wall_time, name, value.")


@store_guard
def runs_panel(polling):
    """The table and the actions; redrawn every REFRESH_S seconds while ``polling``."""
    store = open_store()
    table = runs_table(store)
    if table.empty:
        st.info("No runs stored yet. Start one on the **Train** page, or race several cells on **Race**.")
        return
    training = table["status"].isin(ACTIVE_STATUSES).any()
    if polling != training:  # a run started or ended elsewhere: poll, or stop polling
        st.rerun()
    counts = table["status"].value_counts()
    st.caption(" · ".join([f"{len(table)} runs"] + [f"{count} {status}" for status, count in counts.items()]))
    selected = run_selection(
        table, key="runs_table", columns=TABLE_COLUMNS + final_columns(table) + TAIL_COLUMNS,
        column_config={
            "progress": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0, format="percent"),
            "steps_done": st.column_config.TextColumn("steps"),
            "sweep": st.column_config.LinkColumn("sweep", display_text=r"sweep=(\d+)",
                                                 help="The sweep the run is a trial of: open it on the Sweep page."),
            "varied": st.column_config.TextColumn("varied", help="The sweep's varied values of this run."),
            "created": st.column_config.DatetimeColumn("created", format="YYYY-MM-DD HH:mm"),
            "error": st.column_config.TextColumn("error", width="medium")})
    if "runs_notice" in st.session_state:
        st.success(st.session_state.pop("runs_notice"))
    actions(store, selected)
    for run in selected[selected["error"] != ""].itertuples():
        st.caption(f"#{run.id} {run.status}: {run.error}")


classroom_switch()  # ?classroom=1: the projector's view on every page (pages/ui/classroom.py)
classroom_style()
st.title("Runs")
visitor = current_visitor()
st.caption("Every stored run. Select rows to open them in Compare, " +
           ("stop, delete or export them." if visitor.may_start else "or export their rows."))
store = open_store()
if visitor.may_write:  # a viewer's page writes nothing (Note [Roles] in stability/access/policy.py)
    scheduler.reconcile(store.url)
polling = bool(store.active_runs())
polled(runs_panel, REFRESH_S if polling else None, polling)
