"""What every room of the lab shares and nothing of it depends on: the errors a user's mistake
raises, the metric names, how a value is written, the plugin registry, the device a run uses."""

from __future__ import annotations

from .faces import lazy

# The room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py and
# benchmarks/ may import from it, each -> the module here that holds it (None: that module itself), imported
# on first use, so that importing the room imports none of its modules.
_FACE = {
    "CUBLAS_WORKSPACE_ENV": "determinism", "deterministic_settings": "determinism",
    "fix_cublas_workspace": "determinism", "use_deterministic_algorithms": "determinism", "devices": None,
    "check_dtype": "devices", "describe_device": "devices", "device_facts": "devices", "dtype_problem": "devices",
    "missing_needs": "devices", "on_host": "devices", "reading_device": "devices", "resolve_device": "devices",
    "rng_state": "devices", "run_with_kernel": "devices", "set_rng_state": "devices", "synchronize": "devices",
    "worker_environment": "devices", "ConfigError": "errors", "check_choice": "errors", "one_line": "errors",
    "LockRefused": "flock", "LockTimeout": "flock", "POLL_S": "flock", "file_lock": "flock", "lock_timeout": "flock",
    "shown": "formatting", "duration": "formatting", "format_duration": "formatting", "gpus": None, "GpuMemory": "gpus", "VISIBLE_ENV": "gpus", "gpu_memory": "gpus",
    "parse_gpu_list": "gpus", "visible_gpus": "gpus", "metric_names": None, "A_H_NORM": "metric_names",
    "ELAPSED_S": "metric_names", "ETA_S": "metric_names", "EXAMPLES": "metric_names",
    "FINAL_PREFIXES": "metric_names", "GAP_LOSS": "metric_names", "GATE_PREFIX": "metric_names",
    "H0_NORM": "metric_names", "H0_NORM_TRAIN": "metric_names", "H_T_NORM": "metric_names",
    "H_T_NORM_TRAIN": "metric_names", "LAYER_NORM": "metric_names", "RECURRENT_NORM": "metric_names",
    "SPECTRAL_RADIUS": "metric_names", "SPECTRUM": "metric_names", "STEPS_PER_S": "metric_names",
    "SV_CONDITION": "metric_names", "SV_MARGIN": "metric_names", "SV_MAX": "metric_names", "SV_MIN": "metric_names",
    "TOTAL_NORM": "metric_names", "TRAIN_LOSS": "metric_names", "TRAIN_LR": "metric_names",
    "TRAIN_PENALTY": "metric_names", "VAL_LOSS": "metric_names", "block_name": "metric_names",
    "is_final": "metric_names", "is_log_metric": "metric_names", "is_loss_metric": "metric_names",
    "split_name": "metric_names", "apply_fp32_precision": "precision", "describe_precision": "precision",
    "OptionInfo": "registry", "PluginWarning": "registry", "Registry": "registry", "docstring_line": "registry",
    "option_infos": "registry", "option_parameters": "registry", "own_lines": "registry", "own_text": "registry",
    "host_to": "transfer", "lazy": "faces", "named": "faces",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
