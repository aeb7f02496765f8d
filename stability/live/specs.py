"""A live panel's chart specs: built once, refreshed with new rows only, sent as the same spec.

    charts = [LiveChart("loss", controls, rows.version(names), build, rows_of)]   # a chart, its rows' version
    specs = shared_specs(memo, ("train", location, run_id), charts, final=False)   # every session's specs
    specs = session_specs(cache, slot, charts)                                      # or one session's (a dict)

What a Streamlit page sends for a chart is its Vega-Lite spec with its rows as Arrow bytes
(Note [Stable specs], Note [Arrow rows]); this module makes those specs from Altair charts, keeps them per
chart and refreshes each only when its rows or controls changed (Note [Live charts]), for one session or for
the whole server (Note [Shared specs]), one new chart a look at the first point's pace (Note [Drawn in turn]).
It never imports Streamlit: pages/ui/live.py keeps the caches in a session or in the server and draws.
"""
from __future__ import annotations

import functools
import json
import math
import re
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import pandas as pd
from altair.utils.schemapi import debug_mode

LIVE_POINTS = 800           # per line: min and max of each pixel column of a chart up to 400 px wide (the grid's)
HOVER_POINTS = 150          # per line: nearest-point tooltips, a few pixels apart
REBUILD_FACTOR = 10.0       # chart building takes at most 1/REBUILD_FACTOR of a core (Note [Live charts])
KEPT_SLOTS = 4              # runs whose chart specs a session keeps
SHARED_SLOTS = 16           # slots (watched runs, races) whose chart specs the server keeps (Note [Shared specs])
SHARED_SPECS_PER_SLOT = 24  # chart specs (a chart and its controls) it keeps a slot


# Note [Live charts]
# ------------------
# A fragment rerun that draws nothing clears what it drew, so every chart is sent again at every rerun; an
# identical spec costs the browser almost nothing (Note [Watching cheaply] in stability/live/pace.py), new rows in
# the same spec a Vega re-run of that chart (Note [Stable specs]).  Building an Altair chart costs ~50 ms of
# the server's CPU per chart, nearly all of it Altair's own (encodings inferred and validated, layers' params
# merged); computing its rows costs a few ms.  So each chart is a LiveChart with a data version (the rows it
# draws), its controls, a builder and, where the chart module has one, a function giving the chart's datasets
# alone.  Its spec is kept per chart and rebuilt in full only when its controls changed (at once); when only
# its rows changed, the new rows are put into the spec it has (if they still fit it: as many datasets, the
# same columns; else it is rebuilt), provided the last refresh lies at least REBUILD_FACTOR times its own CPU
# cost in the past: chart work takes at most 1/REBUILD_FACTOR of a core, and a slow machine simply redraws
# less often.
@dataclass(frozen=True)
class LiveChart:
    """One chart of a live panel: ``build()`` returns its Altair chart, ``rows()`` (optional) the datasets of
    that chart in the order its layers first use them; ``data`` changes when its rows do and ``controls``
    when its settings (smoothing, scale, which names) do. ``metric``: the metric row the chart is about,
    whose words the classroom view shows beside it (stability/charts/classroom.py)."""

    key: str
    controls: object
    data: object
    build: Callable[[], object]
    rows: Callable[[], list] | None = None
    metric: str | None = None


@dataclass
class ChartSpecs:
    specs: dict = field(default_factory=dict)     # chart key -> converted spec
    columns: dict = field(default_factory=dict)   # chart key -> the columns of each of its datasets
    versions: dict = field(default_factory=dict)  # chart key -> (controls, data) it was built from
    built_at: float = -math.inf
    cost_s: float = 0.0


def session_specs(cache: dict, slot, charts: list[LiveChart], *, final: bool = False, in_turn: bool = False,
                  build_new: bool = True) -> list[dict | None]:
    """The specs of ``charts`` kept in ``cache`` (one session's dict) under ``slot``, one :class:`ChartSpecs` a
    watched run, the :data:`KEPT_SLOTS` used last kept; each refreshed only when needed (Note [Live charts]).
    ``final``: the data will not change again, so it is drawn now; ``in_turn``, ``build_new``: as
    :func:`refresh_specs`."""
    entry = cache.pop(slot, None) or ChartSpecs()
    cache[slot] = entry  # most recently used last
    while len(cache) > KEPT_SLOTS:
        cache.pop(next(iter(cache)))
    return refresh_specs(entry, charts, final, 0, in_turn, build_new)


def shared_specs(memo, slot, charts: list[LiveChart], *, final: bool = False, in_turn: bool = False,
                 build_new: bool = True) -> list[dict | None]:
    """The specs of ``charts`` kept for every session of the server (Note [Shared specs]) in ``memo`` (a
    SharedMemo: ``get(key, make)`` and ``lock()``) under ``slot``, each chart keyed by its key and controls:
    ``slot`` with a chart's key and controls must name its rows, and its data version must tell them apart."""
    with memo.lock():
        entry = memo.get(slot, ChartSpecs)
        keyed = [replace(chart, key=(chart.key, chart.controls)) for chart in charts]
        return refresh_specs(entry, keyed, final, SHARED_SPECS_PER_SLOT, in_turn, build_new)


# Note [Drawn in turn]
# --------------------
# A run's first rows come with every chart of its panel at once, and every chart is new: on 2 cores shared
# with the run that was ~1 s of the server building seven charts (~50 ms of Altair each, more beside a
# training run), then ~1 s of the browser drawing them, before the first point showed (3.0 s from Start with a
# warm worker whose first row was stored at +0.5 s; benchmarks/first_point.py). While a panel looks at the
# fast pace of the first point (Note [The first point] in stability/live/pace.py), it builds the charts it never
# built in their order, loss first, one a look, and draws it; the next look, a tenth of a second later, the
# next one, and so on: the first point is drawn as soon as the first chart is, and the panel goes back to its
# usual pace only when every chart is drawn. (A budget of 0.15 s of building a look let a second chart be
# built beside the loss chart, and a trace of one Start showed the two taking 0.28-0.43 s before either was
# sent, on 2 cores beside the run's first steps.) Charts already built are refreshed as always; at the usual
# pace every chart is built at once.  Within a look the charts already built are drawn first and the new one
# is built after (pages/ui/live.py's drawn_in_turn): the next look starts at once (the panel's timer is a
# tenth of a second), and while a new chart was built before anything was drawn, the chart already on the page
# stayed stale (faded) through the whole build, a few tenths of a second on 2 cores beside the runs; a trace
# of a Race's Start showed its first chart stale from 1.1 s to 4.2 s, through three such looks.


# Note [Shared specs]
# -------------------
# Thirty sessions watching one run draw the same charts from the same rows (stability/live/tail.py, Note [Many
# watchers]), so the Train and Race panels keep their specs in the server, one ChartSpecs a slot for every
# session, each chart keyed by its key and its controls: a session with other controls (smoothing, log y)
# has specs of its own, and the chart work of a refresh is done once for all, its rate bounded by
# REBUILD_FACTOR for all together.  The specs of controls nobody uses any more go, oldest first, beyond
# SHARED_SPECS_PER_SLOT, and the specs of the SHARED_SLOTS slots drawn last are kept (each chart's rows are Arrow
# bytes: a few hundred kB at most, Note [Light charts] in stability/charts/lines.py).
def refresh_specs(entry: ChartSpecs, charts: list[LiveChart], final: bool, kept: int,
                  in_turn: bool = False, build_new: bool = True) -> list[dict | None]:
    """Bring the stale specs of ``charts`` in ``entry`` up to date (Note [Live charts]) and drop the others:
    all of them when ``kept`` is 0, else the oldest beyond ``kept``. ``in_turn``: one new chart is built,
    the other new ones are None (Note [Drawn in turn])."""
    stale = [chart for chart in charts if entry.versions.get(chart.key) != (chart.controls, chart.data)]
    urgent = any(chart.key not in entry.specs or entry.versions[chart.key][0] != chart.controls for chart in stale)
    now = time.monotonic()
    if stale and (urgent or final or now - entry.built_at >= REBUILD_FACTOR * entry.cost_s):
        started, built_new = time.thread_time(), False
        for chart in stale:
            new = chart.key not in entry.specs
            if new and (not build_new or (in_turn and built_new)):
                continue  # drawn later in this look (pages/ui/live.py's drawn_in_turn) or at a later look
            refresh_chart(entry, chart)
            built_new = built_new or new
        entry.built_at, entry.cost_s = now, time.thread_time() - started
    drawn = {chart.key for chart in charts}
    unused = [key for key in entry.specs if key not in drawn]
    for key in unused[:len(unused) if not kept else max(0, len(entry.specs) - kept)]:
        del entry.specs[key], entry.columns[key], entry.versions[key]
    return [entry.specs.get(chart.key) for chart in charts]


def refresh_chart(entry: ChartSpecs, chart: LiveChart) -> None:
    """Bring ``chart``'s spec up to date: its new rows in the spec it has when only its rows changed and
    they fit that spec, else a full build."""
    built = entry.versions.get(chart.key)
    if built is not None and built[0] == chart.controls and chart.rows is not None:
        frames = chart.rows()
        if [list(frame.columns) for frame in frames] == entry.columns[chart.key]:
            entry.specs[chart.key] = {**entry.specs[chart.key], "datasets": arrow_datasets(frames)}
            entry.versions[chart.key] = (chart.controls, chart.data)
            return
    with debug_mode(False):  # Note [Unvalidated live specs]
        entry.specs[chart.key], entry.columns[chart.key] = vega_lite_spec(chart.build())
    entry.versions[chart.key] = (chart.controls, chart.data)


# Note [Unvalidated live specs]
# -----------------------------
# Altair checks every schema object against the Vega-Lite JSON schema as it is made (its "debug mode"), also
# when the spec is converted with validate=False. A live page builds with that check off: a loss chart
# took 59 ms with it and 50 ms without (2 cores, 2026-11-26), and a run's first point waits for its first
# chart. The same chart builders are checked with it on by the chart tests (tests/test_charts.py builds
# every chart outside this switch), so a spec the schema refuses still fails a test. The switch is
# Altair's module-wide flag: another thread building a chart meanwhile is merely unchecked or checked,
# never wrong.


def charts_built_together(key: str, count: int, controls, data, build_all: Callable[[], list],
                          metrics: list[str] | None = None) -> list[LiveChart]:
    """``count`` live charts over the charts one call of ``build_all()`` returns (pages that overlay several
    runs build their charts together); ``build_all`` runs at most once per rerun, and only when a chart
    needs it. ``metrics``: the metric each chart is about (:attr:`LiveChart.metric`), in the same order."""
    built: list = []

    def chart(index: int):
        if not built:
            built.append(build_all())
        return built[0][index]

    return [LiveChart(f"{key}/{index}", controls, data, functools.partial(chart, index),
                  metric=metrics[index] if metrics else None) for index in range(count)]


def skeleton_spec(title: str, height: int) -> dict:
    """The spec of an empty loss chart titled ``title``: its axes and title, no rows (pages/ui/live.py, Note
    [Skeleton])."""
    from stability import charts

    empty = pd.DataFrame({"run_id": pd.Series(dtype="int64"), "step": pd.Series(dtype="int64"),
                          "wall_time": pd.Series(dtype="float64"), "name": pd.Series(dtype="object"),
                          "value": pd.Series(dtype="float64"), "run": pd.Series(dtype="object")})
    with debug_mode(False):
        return vega_lite_spec(charts.metric_chart(empty, names=["train/loss", "val/loss"], title=title,
                                                   height=height, max_points=LIVE_POINTS))[0]


# Note [Stable specs]
# -------------------
# Streamlit's frontend keeps a Vega view as long as the chart's spec (its JSON without the data) and its
# dataset names stay the same, and then only swaps the rows of a dataset whose bytes changed; any other
# change of the spec compiles the Vega-Lite spec and builds a new view.  st.altair_chart names each
# dataset by a hash of its rows and Altair names its selections and views afresh for every chart, so a
# chart rebuilt with one new row used to be a new spec: a full re-embed at every redraw.  Here datasets are
# named by their place in the chart (rows_0, rows_1, ...; never data_<n>, which Vega-Lite gives its own
# sources: a dataset of that name draws nothing) and the generated names are numbered within the
# chart, so a chart whose rows changed reaches the browser as the same spec with new rows.  The spec is
# produced without Altair's JSON-schema validation (two thirds of its building cost, and the same specs
# are validated by tests/test_charts.py); like st.altair_chart, Altair's default theme is left out.
#
# Two embedding options make every redraw cheaper (Chromium's CPU from /proc, a page of six line charts
# redrawn every 2 s): Vega's canvas renderer instead of SVG (Streamlit picks canvas by itself only above
# 2000 marks; 29 -> 19 CPU s a minute), and no ARIA description per mark (Vega-Lite builds a text label for
# every point through Streamlit's expression interpreter, and Streamlit drops them itself above 5000 marks;
# 19 -> 17 s).  A screen reader still gets the chart's title; hundreds of per-point labels were no help to it.
#
# Note [Arrow rows]
# -----------------
# A kept spec goes out again at every rerun, so its datasets are serialised once, when its rows change, as
# the Arrow IPC bytes Streamlit would have made of each DataFrame: Streamlit passes bytes in a spec's
# ``datasets`` through as they are (a DataFrame there it would convert again at every rerun), the browser
# sees the same bytes as before (the 75-byte reference of Note [Watching cheaply] in stability/live/pace.py), and
# two specs compare equal when their rows do.  The bytes are written with pyarrow (arrow_bytes), not with
# streamlit.dataframe_util: that module is Streamlit's internal code, free to change within the open
# ``streamlit>=1.40`` of requirements.txt, while pyarrow's Table.from_pandas and IPC stream writer are
# public and stable, and pyarrow is a dependency of Streamlit itself (every Streamlit release needs it to
# send a DataFrame).  tests/test_live_specs.py checks that the bytes read back as the rows.
_GENERATED_NAME = re.compile(r'"(param|view)_[0-9a-f]+(?:_[0-9]+)*"')
_DEFAULT_THEME = {"view": {"continuousWidth": 300, "continuousHeight": 300}}


def vega_lite_spec(chart) -> tuple[dict, list[list[str]]]:
    """The chart as the Vega-Lite spec Streamlit sends, its datasets serialised to Arrow, its names stable
    (Note [Stable specs]), and the columns of each of its datasets; ``chart`` gives up its data to the spec."""
    frames: dict[int, tuple[str, object]] = {}
    _name_datasets(chart, frames)
    spec = chart.to_dict(validate=False)
    numbers: dict[str, str] = {}
    text = _GENERATED_NAME.sub(
        lambda match: numbers.setdefault(match.group(0), f'"{match.group(1)}_{len(numbers) + 1}"'), json.dumps(spec))
    spec = json.loads(text)
    if spec.get("config") == _DEFAULT_THEME:
        del spec["config"]
    spec.setdefault("config", {})["aria"] = False
    spec["usermeta"] = {"embedOptions": {"renderer": "canvas"}}
    ordered = [data for _, data in frames.values()]
    spec["datasets"] = arrow_datasets(ordered)
    return spec, [list(data.columns) for data in ordered]


def arrow_datasets(frames: list) -> dict[str, bytes]:
    """``rows_0``, ``rows_1``, ... -> the frames as Arrow bytes, as Streamlit sends them (Note [Arrow rows])."""
    return {f"rows_{index}": arrow_bytes(frame) for index, frame in enumerate(frames)}


def arrow_bytes(frame: pd.DataFrame) -> bytes:
    """``frame`` as an Arrow IPC stream, written with pyarrow's public API as Streamlit writes a DataFrame
    (``pyarrow.Table.from_pandas`` keeps a RangeIndex as metadata and any other index as a column)."""
    import pyarrow as pa

    table = pa.Table.from_pandas(frame)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _name_datasets(chart, frames: dict) -> None:
    """Replace every DataFrame of ``chart`` and its layers by a dataset name (``rows_<n>``, in the order
    met; one name per frame object), collected in ``frames``: id -> (name, frame)."""
    import altair as alt

    data = getattr(chart, "data", alt.Undefined)
    if isinstance(data, pd.DataFrame):
        name, _ = frames.setdefault(id(data), (f"rows_{len(frames)}", data))  # as arrow_datasets names them
        chart.data = alt.NamedData(name=name)
    layers = getattr(chart, "layer", alt.Undefined)
    for layer in layers if isinstance(layers, list) else []:
        _name_datasets(layer, frames)


__all__ = ["HOVER_POINTS", "KEPT_SLOTS", "LIVE_POINTS", "REBUILD_FACTOR", "SHARED_SLOTS", "SHARED_SPECS_PER_SLOT",
           "ChartSpecs", "LiveChart", "arrow_bytes", "arrow_datasets", "charts_built_together", "refresh_chart",
           "refresh_specs", "session_specs", "shared_specs", "skeleton_spec", "vega_lite_spec"]
