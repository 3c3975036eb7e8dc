"""`python -m cli`: the same as the `openenv-hub` console script."""

from cli.main import main

raise SystemExit(main())
