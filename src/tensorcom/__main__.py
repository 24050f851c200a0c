"""`python -m tensorcom SUBCOMMAND [ARGS]`: the same as the `tensorcom` umbrella command."""

import sys

from tensorcom.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
