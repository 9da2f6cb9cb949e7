"""One module per ``popviz`` subcommand (see popviz.cli)."""
