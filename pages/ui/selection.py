"""The run table with multi-row selection, shared by the Compare and Runs pages.

Streamlit selects table rows by position. Between reruns runs appear (a new run is the top row) and
disappear (deleted), so before drawing, the stored selection is moved to follow the same run ids.
"""
import streamlit as st

from stability.runs.table import LEFT_OUT

FINAL_FORMAT = "%.4g"


def final_columns(table):
    """The final held-out metric columns of :func:`stability.runs.table.run_table` (val/..., test/...)."""
    return [column for column in table.columns if column.startswith(("val/", "test/"))]


def run_selection(table, *, key, columns, default_ids=(), column_config=None):
    """Draw ``table[columns]`` with row selection; return the selected rows of ``table``, oldest first.

    ``default_ids`` are selected the first time the table is drawn in a session (e.g. from the URL).
    """
    ids = table["id"].tolist()
    ids_key = f"{key}_ids"
    previous = st.session_state.get(ids_key)
    if previous is not None and previous != ids and key in st.session_state:
        kept = {previous[row] for row in st.session_state[key]["selection"]["rows"] if row < len(previous)}
        st.session_state[key] = {"selection": {"rows": [row for row, run_id in enumerate(ids) if run_id in kept]}}
    st.session_state[ids_key] = ids
    config = {"id": st.column_config.NumberColumn("id", format="%d"),
              **{column: st.column_config.NumberColumn(column, format=FINAL_FORMAT) for column in final_columns(table)},
              **(column_config or {})}
    event = st.dataframe(
        table[columns], key=key, on_select="rerun", selection_mode="multi-row",
        selection_default={"selection": {"rows": [row for row, run_id in enumerate(ids) if run_id in default_ids]}},
        hide_index=True, width="stretch", placeholder="—", column_config=config)
    if table.attrs.get(LEFT_OUT):  # a run logging thousands of names (Note [Metric columns] in stability/runs/table.py)
        st.caption(f"{table.attrs[LEFT_OUT]:,} more held-out metric{'s' * (table.attrs[LEFT_OUT] > 1)} not shown as "
                   "columns: the table shows the loss, the tasks' metrics and 20 others; open a run in Compare to "
                   "draw any of them.")
    return table.iloc[event.selection.rows].sort_values("id")
