"""`python -m simbench`: the `simbench` command, for an environment whose scripts are not on PATH."""

from simbench.cli import main

main()
