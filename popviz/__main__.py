from popviz.cli import entry

entry()
