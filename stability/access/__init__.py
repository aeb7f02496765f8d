"""Who may do what on a server (Note [Roles] in policy.py) and the guarded actions pages call (actions.py).

The room's public face: pages and the CLI import these names from here."""
from .actions import (Refused, check_start, check_sweep, delete_run, mark_ended, operate, require, resume_run,
                      resume_sweep, start_run, start_sweep, stop_run, stop_sweep, sweep_owner)
from .policy import (OPERATOR, OPERATORS_ENV, STUDENT, STUDENTS_ENV, VIEW_ONLY_ENV, VIEWER, Limits, Policy, Visitor,
                     is_loopback, refusal)
from .sign_in import SignIn, missing_packages, sign_in_decides, sign_in_setup

__all__ = ["OPERATOR", "OPERATORS_ENV", "STUDENT", "STUDENTS_ENV", "VIEW_ONLY_ENV", "VIEWER", "Limits", "Policy",
           "Refused", "Visitor", "check_start", "delete_run", "is_loopback", "mark_ended", "operate", "refusal", "require",
           "resume_run", "start_run", "stop_run", "check_sweep", "resume_sweep", "start_sweep", "stop_sweep",
           "sweep_owner",
           "SignIn", "missing_packages", "sign_in_decides", "sign_in_setup"]
