"""`python -m gateway`: the stand-alone gateway."""

from gateway.app import main

main()
