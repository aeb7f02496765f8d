"""The command line (``python -m stability``) and the worker processes' entry point."""
