"""A sweep's Optuna study: its sampler, its trials, and where it is stored.

    study = create_study(spec, storage(store), name)   # in the run store's database
    asked = next_trial(study, spec)                      # (trial, config) or None when all were asked
    tell(study, trial.number, final_val_loss)

Optuna is imported only by the functions that need it (the CLI and the pages
start without it).
"""
from __future__ import annotations

from typing import Any

from .spec import SEED_PARAM, SWEEP_ATTR, SweepError, SweepSpec, direction



def make_sampler(spec: SweepSpec):
    """The Optuna sampler of ``spec``, seeded with the base seed (the same sweep asks the same trials)."""
    import optuna

    seed = spec.base.train.seed
    if spec.sampler == "grid":
        space = {vary.field: vary.choices() for vary in spec.vary}
        return optuna.samplers.GridSampler({**space, SEED_PARAM: spec.seed_values()}, seed=seed)
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def create_study(spec: SweepSpec, storage: str | None = None, study_name: str | None = None, *,
                 load_if_exists: bool = False):
    """A new ``optuna.Study`` for ``spec`` (or the existing one named ``study_name`` with
    ``load_if_exists``); ``storage`` is Optuna's (an RDB URL, or None: in memory). The spec is kept
    as the study's user attribute ``"sweep"`` (:func:`load_study` reads it)."""
    import optuna

    spec.validate(allow_large=True)
    pruner = optuna.pruners.MedianPruner() if spec.prune else optuna.pruners.NopPruner()
    study = optuna.create_study(storage=storage, sampler=make_sampler(spec), pruner=pruner,
                                study_name=study_name, direction=direction(spec), load_if_exists=load_if_exists)
    if SWEEP_ATTR not in study.user_attrs:
        study.set_user_attr(SWEEP_ATTR, spec.to_dict())
    return study


def load_study(study_name: str, storage: str):
    """``(study, spec)`` of a sweep's study stored in ``storage``, with its sampler and pruner."""
    import optuna

    stored = optuna.load_study(study_name=study_name, storage=storage)
    if SWEEP_ATTR not in stored.user_attrs:
        raise SweepError(f"study {study_name!r} is not a sweep (no {SWEEP_ATTR!r} attribute)")
    spec = SweepSpec.from_dict(stored.user_attrs[SWEEP_ATTR])
    return create_study(spec, storage, study_name, load_if_exists=True), spec


def next_trial(study, spec: SweepSpec):
    """``(trial, config)``: the study's next trial (``study.ask()``) and the run it stands for, or
    None when the sweep has asked all its runs. An enqueued (waiting) trial is always taken first:
    random and TPE sampling enqueue each new setting's other seeds. Report the run's final
    :func:`objective_name` with :func:`tell`."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    if not any(t.state == TrialState.WAITING for t in trials) and len(trials) >= spec.size():
        return None
    distributions = {vary.field: vary.distribution() for vary in spec.vary}
    if spec.sampler == "grid":
        distributions[SEED_PARAM] = CategoricalDistribution(spec.seed_values())
    trial = study.ask(distributions)
    setting = setting_of(trial.params, spec)
    if spec.sampler == "grid":
        seed = trial.params[SEED_PARAM]
    else:
        seed = trial.user_attrs.get("seed")
        if seed is None:
            seed = spec.seed_values()[0]
            for other in spec.seed_values()[1:]:
                study.enqueue_trial(trial.params, user_attrs={"seed": other})
    trial.set_user_attr("seed", seed)
    return trial, spec.config_for(setting, seed)


def tell(study, trial, value: float | None = None, state=None):
    """``study.tell(trial, value, state)``, also for a grid's last trial: Optuna's GridSampler then
    calls ``study.stop()``, which raises RuntimeError outside ``study.optimize`` (a documented
    limit of ask-and-tell with GridSampler; the trial's result is stored before it raises).
    Returns the finished ``FrozenTrial``."""
    import optuna

    try:
        return study.tell(trial, value, state)
    except RuntimeError:
        sampler = study.sampler
        if not (isinstance(sampler, optuna.samplers.GridSampler) and sampler.is_exhausted(study)):
            raise
        number = trial if isinstance(trial, int) else trial.number
        return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


def setting_of(params: dict[str, Any], spec: SweepSpec) -> dict[str, Any]:
    """The typed setting (``{field: value}``) of a trial's Optuna ``params``."""
    return {vary.field: vary.decode(params[vary.field]) for vary in spec.vary}


def storage(store):
    """The Optuna RDB storage of ``store``'s database (a sweep's study lives beside its runs)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not store.shared:  # SQLite: wait for the writer (WAL) instead of failing at once
        engine = {"connect_args": {"timeout": 60}}
    else:
        engine = {"pool_pre_ping": True}
    return optuna.storages.RDBStorage(store.url, engine_kwargs=engine)
