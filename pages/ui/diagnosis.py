"""What is happening, in words: a live panel's findings (stability.analysis.diagnosis) drawn as a short list.

    findings = live_findings(("train", store.location, run_id), rows, record)   # computed when the rows changed
    show_findings(st, findings)                  # "What is happening": icon, sentence, see <chart>
    st.markdown(race_line("rnn", findings))      # one line: the most severe finding of a run

Note [Findings cost nothing when nothing changed]
-------------------------------------------------
A live panel reruns on its timer whether or not new rows came (stability/live/pace.py, Note [Watching cheaply]).
The findings are a function of the rows the panel has already read and of the run record it has already
read, so they are kept in the server, for every session watching the same run (stability/live/tail.py, Note
[Many watchers]), and computed again only when the rows or the record's status, step or error moved: no
read is added, and an unchanged rerun costs a dictionary lookup.
They are drawn as plain markdown (no alert boxes: a page's errors stay the run's own).

Streamlit only; the rules themselves live in stability.analysis.diagnosis.
"""
from __future__ import annotations

import re

from stability.analysis.diagnosis import Finding, diagnose

from .shared import shared_memo

FINDINGS_KEY = "_live_findings"
ICONS = {"problem": ":red[:material/error:]", "warning": ":orange[:material/warning:]",
         "info": ":blue[:material/info:]"}
GOOD_ICON = ":green[:material/check_circle:]"  # the "learning" finding: good news, not a caveat
_MARKDOWN = re.compile(r"([\\*_\[\]$~`<>#|])")


def live_findings(slot, rows, record) -> list[Finding]:
    """The findings of a live panel's rows (``LiveRows``) and run record, kept under ``slot`` and
    recomputed only when either changed (Note [Findings cost nothing when nothing changed])."""
    version = (id(rows.metrics) if rows.token is None else rows.token, len(rows.metrics), record.status, record.step,
               record.error, record.baseline, record.metric)
    return shared_memo(FINDINGS_KEY).get((slot, version), lambda: diagnose(rows.metrics, record))


def escape(text: str) -> str:
    """``text`` shown literally in Streamlit markdown (σ* stays a star, not emphasis; no LaTeX)."""
    return _MARKDOWN.sub(r"\\\1", text)


def icon(finding: Finding) -> str:
    return GOOD_ICON if finding.rule == "learning" else ICONS.get(finding.severity, ICONS["info"])


def where(finding: Finding) -> str:
    """``see ‖∂L/∂h₀‖``: the chart to look at (every finding's sentence already names the step it started)."""
    return f"see {finding.chart_title}"


def show_findings(container, findings: list[Finding], title: str = "What is happening") -> None:
    """A titled list, one finding a line: icon, its sentence (with the step it started), and grey
    ``see <chart>``."""
    lines = [f"{icon(finding)} {escape(finding.text)} :gray[{escape(where(finding))}]" for finding in findings]
    body = "  \n".join(lines) if lines else ":gray[Nothing stands out yet.]"
    container.markdown(f"**{title}**  \n{body}")


def race_line(label: str, findings: list[Finding]) -> str:
    """One markdown line for a run of a race: its most telling finding (a problem, else a warning, else
    whether it is learning, else the first), and how many more there are."""
    if not findings:
        return f"**{escape(label)}**: :gray[nothing stands out yet]"
    first = min(findings, key=lambda finding: (finding.severity == "info", finding.rule != "learning"))
    more = len(findings) - 1
    extra = f" (+{more} more)" if more else ""
    return f"**{escape(label)}**: {icon(first)} {escape(first.text)} :gray[{escape(where(first))}{extra}]"


__all__ = ["live_findings", "race_line", "show_findings"]
