from queuelake.cli import console

raise SystemExit(console())
