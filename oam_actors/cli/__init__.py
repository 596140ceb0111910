"""The ``oam-actors`` command line."""
