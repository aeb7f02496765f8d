"""Training a model, with the papers' readings taken between steps: the loop, its hooks, the probes."""
