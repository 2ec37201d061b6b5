"""`python -m shoal.tune '<TrialSpec json>'`: measure one trial in this process (the child that
`shoal.tune.runner` launches). The entry lives here rather than under `shoal.tune.trial` so that
running it does not import the module it runs a second time (which Python warns about on stderr,
where the parent looks for a failed trial's cause)."""

from shoal.tune.trial import main

raise SystemExit(main())
