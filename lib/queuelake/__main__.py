from queuelake.cli import main

raise SystemExit(main())
