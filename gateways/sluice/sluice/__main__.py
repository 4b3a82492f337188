from sluice.main import main

raise SystemExit(main())
