"""rankscope's version, in a module of its own so that any stage can read it without importing the package's
lazy facade (``rankscope/__init__.py``)."""
__version__ = "0.1.0"
