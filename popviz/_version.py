"""popviz's version, in a module of its own so that every layer can read it without importing the
package face (``popviz/__init__.py``)."""

__version__ = "0.1.0"
