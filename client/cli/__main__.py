import sys

from client.cli import main

main(prog_name=sys.argv[0])
