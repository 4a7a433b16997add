"""`python -m planc ...`: the console script."""

from ._cli import main

main()
