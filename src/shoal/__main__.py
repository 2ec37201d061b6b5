from shoal.cli import main

raise SystemExit(main())
