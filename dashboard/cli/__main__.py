"""`python -m dashboard.cli` runs the `attnscope` command line, as `python -m dashboard` does."""

from dashboard.cli import main

raise SystemExit(main())
