"""The package version, read by setup.cfg and reported by ``zlink-trio``."""

__version__ = "0.1.0.dev0"
