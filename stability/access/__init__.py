"""Who may do what on a server (Note [Roles] in policy.py) and the guarded actions pages call (actions.py).

The room's public face: pages and the CLI import these names from here."""
from .actions import Refused, check_start, delete_run, mark_ended, operate, require, resume_run, start_run, stop_run
from .policy import (OPERATOR, OPERATORS_ENV, STUDENT, STUDENTS_ENV, VIEW_ONLY_ENV, VIEWER, Limits, Policy, Visitor,
                     is_loopback, refusal)

__all__ = ["OPERATOR", "OPERATORS_ENV", "STUDENT", "STUDENTS_ENV", "VIEW_ONLY_ENV", "VIEWER", "Limits", "Policy",
           "Refused", "Visitor", "check_start", "delete_run", "is_loopback", "mark_ended", "operate", "refusal", "require",
           "resume_run", "start_run", "stop_run"]
