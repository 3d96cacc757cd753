"""The email service as a package, importable without Chalice running."""
__version__ = "0.1.0"
