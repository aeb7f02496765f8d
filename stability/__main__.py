"""``python -m stability``: the command line (:mod:`stability.cli.main`)."""
import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
