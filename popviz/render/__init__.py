"""Renderers: console (rich), Markdown and JSON views of one :class:`~popviz.analysis.Result`."""
