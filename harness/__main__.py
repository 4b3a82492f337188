"""`python -m harness <command>`: the one entry point (harness/commands/)."""
import sys

from harness.commands import main

sys.exit(main())
