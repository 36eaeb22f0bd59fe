"""`python -m dashboard` runs the `attnscope` command line."""

from dashboard.cli import main

raise SystemExit(main())
