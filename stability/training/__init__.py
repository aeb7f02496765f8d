"""Training a model, with the papers' readings taken between steps.

    run.py          build_and_train(config, hooks=...): build the task and the model, train, a TrainResult
                    (a run of a store: stability.train_run, in execution/lifecycle, which owns its status)
    trainer.py      Trainer(model, task, config, hooks=...): the loop, for a model built anywhere
    build.py        task, model and optimizer from a RunConfig
    hooks.py        every reading, evaluation and checkpoint as a hook (the hook contract)
    sinks.py        where the rows go: StoreSink (a run store's run), MemorySink; TrainResult
    checkpoints.py  the checkpoint format, save, load, ResumeError
    evaluation.py, schedule.py, batches.py   fixed evaluation sets, learning-rate schedules, batches to device
    probes.py       the gradient probes, which need no training
"""
