"""What every room of the lab shares and nothing of it depends on: the errors a user's mistake
raises, the metric names, how a value is written, the plugin registry, the device a run uses."""
