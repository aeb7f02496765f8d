"""Who may do what on a server: operators control, students start their own runs within limits, viewers watch.

    policy = Policy.from_environment(listen_address="0.0.0.0")   # the server's address and $STABILITY_*
    visitor = policy.visitor(identity="ada@school.example")      # None: nobody signed in
    visitor.may_start, visitor.may_change(run.owner), visitor.may_write
    check_start(visitor, config, store)                          # a student's limits, one line past them

Note [Roles]
------------
TensorBoard serves read-only and listens on localhost unless told otherwise; MLflow's basic auth gives READ,
EDIT and MANAGE with READ the default; JupyterHub gives a classroom roles and per-user limits.  Here:

* **viewer**: sees every page's runs, live charts, Compare, Reproduce's results and a bounded Gradient flow;
  has no Start, Stop, Resume, Delete, Run or sweep Start, and a page it opens writes nothing (no reconcile,
  no warm worker: those are the operators' servers' work on the same store).
* **operator**: everything, as on a lecturer's own machine.
* **student**: a signed-in visitor who is not an operator, on a server whose operators allow students to
  run (``STABILITY_STUDENTS=run``): starts Train and Race runs of their own within :class:`Limits` (active
  runs, steps, operations, memory, checkpoint size), and stops, resumes or deletes only those
  (``runs.owner``).  Where ``STABILITY_STUDENTS=sweep`` a student also starts sweeps of their own: at most
  ``sweep_trials`` runs, each within the run limits, ``sweep_operations`` in all, ``active_sweeps`` at once
  (Note [A student's sweep] in actions.py); the sweep records its owner and its runs carry it, and the
  student stops or resumes only their own sweeps.  Presets stay the operators'.

Which role a visitor has (:meth:`Policy.visitor`), in order:

1. ``STABILITY_VIEW_ONLY=1``: everybody views, whatever else is set (a server opened for a room on purpose).
2. Where ``STABILITY_OPERATORS`` names operators, the sign-in decides, wherever the server listens: a
   visitor named there is an operator; another signed-in visitor is a student where
   ``STABILITY_STUDENTS`` is ``run`` or ``sweep``, else a viewer; nobody signed in views.  (Behind an
   authenticating proxy the server usually listens on loopback, and every visitor arrives from the proxy:
   loopback then says nothing about who is on this machine.)
3. With no operators named, a server that listens on the loopback address only is its machine's: everybody
   who reaches it is an operator (the lecturer's own server, the default ``.streamlit/config.toml``).
4. With no operators named, beyond loopback: a signed-in visitor is a student where ``STABILITY_STUDENTS`` is
   ``run`` or ``sweep``; everybody else views.  **View-only is the default whenever the server listens beyond loopback.**

An identity is what the server's sign-in says (``st.user``: OpenID Connect through ``st.login``, or the
header an authenticating proxy sets, mapped by ``server.trustedUserHeaders``); the pages read it
(pages/ui/access.py), this module only decides.  ``stability classroom`` starts the two servers a lecturer
needs: the room's, view-only, and their own on loopback, on one store.
"""
from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from stability.core.errors import ConfigError

VIEW_ONLY_ENV = "STABILITY_VIEW_ONLY"
OPERATORS_ENV = "STABILITY_OPERATORS"
STUDENTS_ENV = "STABILITY_STUDENTS"
OPERATOR, STUDENT, VIEWER = "operator", "student", "viewer"
STUDENT_CHOICES = ("", "view", "run", "sweep")  # STABILITY_STUDENTS: nothing, Train and Race runs, runs and sweeps
_TRUE = {"1", "true", "yes", "on"}
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(address: str | None) -> bool:
    """Whether a server told to listen on ``address`` listens on this machine's loopback only.  An empty
    address or None is every interface (Streamlit's default when ``server.address`` is unset)."""
    if not address:
        return False
    text = address.strip().strip("[]").lower()
    if text in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Limits:
    """What one student may hold at once and ask of one run (Note [Roles]); ``$STABILITY_STUDENT_*``."""

    active_runs: int = 2             # queued or running, of theirs
    steps: int = 5_000
    operations: float = 2e12         # floating-point operations of the whole run (budget.work)
    memory_bytes: int = 1 << 30      # the run's peak (budget.footprint)
    checkpoint_bytes: int = 64 << 20  # weights and optimizer state (budget.checkpoint_bytes, as the disk check)
    sweep_trials: int = 20           # runs of one sweep (trials x seeds), where students may sweep
    sweep_operations: float = 2e13   # operations of a whole sweep, its runs together (ten runs at the limit)
    active_sweeps: int = 1           # sweeps of theirs running at once

    def describe(self, sweeps: bool = False) -> str:
        """The limits in words, for the caption beside a student's Start."""
        from stability.admission import budget

        run = (f"at most {self.active_runs} runs at once, each up to {self.steps:,} steps, "
               f"{self.operations:.2g} operations, {budget.format_bytes(self.memory_bytes)} of memory and a "
               f"{budget.format_bytes(self.checkpoint_bytes)} checkpoint")
        if not sweeps:
            return run
        return (f"{run}; a sweep: at most {self.sweep_trials} runs, {self.sweep_operations:.2g} operations in all, "
                f"{self.active_sweeps} running at once")

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> Limits:
        """The defaults, each replaced by ``STABILITY_STUDENT_<FIELD>`` where set (a bad value: one line)."""
        values = {}
        for name, default in cls().__dict__.items():
            text = env.get(f"STABILITY_STUDENT_{name.upper()}")
            if text is None:
                continue
            try:
                value = type(default)(float(text))
            except ValueError:
                raise ConfigError(f"STABILITY_STUDENT_{name.upper()} must be a number, got {text!r}") from None
            if not value > 0:
                raise ConfigError(f"STABILITY_STUDENT_{name.upper()} must be positive, got {text!r}")
            values[name] = value
        return cls(**values)


@dataclass(frozen=True)
class Visitor:
    """One session's role, its identity where signed in, and the reason in words (shown to it)."""

    role: str
    identity: str | None = None
    reason: str = ""
    limits: Limits = field(default_factory=Limits)
    sweeps: bool = False  # students may start sweeps on this server (STABILITY_STUDENTS=sweep)

    @property
    def may_start(self) -> bool:
        """May start Train and Race runs (a student within its limits: :func:`check_start`)."""
        return self.role in (OPERATOR, STUDENT)

    @property
    def may_operate(self) -> bool:
        """May start presets, and act on every run and sweep."""
        return self.role == OPERATOR

    @property
    def may_sweep(self) -> bool:
        """May start sweeps: an operator, or a student where the server allows it (within the sweep limits:
        :func:`~stability.access.actions.check_sweep`)."""
        return self.role == OPERATOR or (self.role == STUDENT and self.sweeps)

    @property
    def may_write(self) -> bool:
        """May a page it opens write to the store at all (reconcile, warm workers)."""
        return self.role != VIEWER

    def may_change(self, owner: str | None) -> bool:
        """May stop, resume or delete a run started by ``owner`` (None: an operator's or the CLI's)."""
        return self.role == OPERATOR or (self.role == STUDENT and owner is not None and owner == self.identity)

    @property
    def owner(self) -> str | None:
        """What a run it starts records as its owner: a student's identity; an operator's runs are nobody's
        in particular (None), as the CLI's are."""
        return self.identity if self.role == STUDENT else None


@dataclass(frozen=True)
class Policy:
    """The server's rule (Note [Roles]): read once from its address and environment."""

    loopback: bool
    view_only: bool = False
    operators: frozenset[str] = frozenset()
    students_run: bool = False
    students_sweep: bool = False
    limits: Limits = field(default_factory=Limits)

    @classmethod
    def from_environment(cls, listen_address: str | None, env: Mapping[str, str] | None = None) -> Policy:
        env = os.environ if env is None else env
        operators = frozenset(name.strip().lower() for name in env.get(OPERATORS_ENV, "").split(",") if name.strip())
        students = env.get(STUDENTS_ENV, "").strip().lower()
        if students not in STUDENT_CHOICES:
            raise ConfigError(f"{STUDENTS_ENV} must be 'view', 'run' (Train and Race runs) or 'sweep' (runs and "
                              f"sweeps), got {students!r}")
        return cls(loopback=is_loopback(listen_address),
                   view_only=env.get(VIEW_ONLY_ENV, "").strip().lower() in _TRUE,
                   operators=operators, students_run=students in ("run", "sweep"), students_sweep=students == "sweep",
                   limits=Limits.from_environment(env))

    def visitor(self, identity: str | None = None) -> Visitor:
        """The role of a session signed in as ``identity`` (None: not signed in)."""
        who = identity.strip().lower() if identity and identity.strip() else None
        if self.view_only:
            return Visitor(VIEWER, who, f"this server is view-only ({VIEW_ONLY_ENV})", self.limits)
        if self.loopback and not self.operators:
            return Visitor(OPERATOR, who, "this server listens on this machine only", self.limits)
        if who is not None and who in self.operators:
            return Visitor(OPERATOR, who, f"signed in as {who}, an operator", self.limits)
        if who is not None and self.students_run:
            what = "runs and sweeps" if self.students_sweep else "runs"
            return Visitor(STUDENT, who, f"signed in as {who}: you may start {what} of your own", self.limits,
                           sweeps=self.students_sweep)
        if who is not None:
            return Visitor(VIEWER, who, f"signed in as {who}, not an operator of this server", self.limits)
        if self.operators:
            return Visitor(VIEWER, None, "not signed in", self.limits)
        return Visitor(VIEWER, None, "this server is open to the network and names no operators", self.limits)


def refusal(visitor: Visitor, action: str) -> str:
    """The one line a visitor gets for an action its role does not allow."""
    if visitor.role == VIEWER:
        return f"View only: {visitor.reason}; {action} is for the lecturer's own server."
    return f"Not yours to {action}: {visitor.reason}."
