"""Front doors: stdio line framing, TCP JSON lines and WebSocket serving (tokens, limits, the shared hub)."""
