"""`python -m mathrl` is the `mathrl` command (torchrun runs it as `-m mathrl train`)."""

from mathrl.pipeline.cli import main

raise SystemExit(main())
