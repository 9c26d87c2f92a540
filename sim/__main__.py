"""``python -m sim``: the `kvsim` command line without the installed script."""

from sim.cli import main

main()
