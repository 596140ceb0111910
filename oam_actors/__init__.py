"""oam-actors: an actor-model runtime for the bridge protocol v1.0."""

__version__ = "0.1.0"
