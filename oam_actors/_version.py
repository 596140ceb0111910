"""The package version, in a leaf module: layers below the package root read it from here."""

__version__ = "0.1.0"
